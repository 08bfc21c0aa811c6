/* Growable byte buffers and intern tables of byte strings (every size checked before use).
 * The tables point into the scanned buffer, which must outlive them. */
#ifndef PROFKIT_STORE_H
#define PROFKIT_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *data;
    size_t len, cap;
} Grow;

typedef struct {
    const unsigned char *s;
    size_t n;
} Key;

typedef struct {
    uint32_t *slots; /* 0: empty, else id + 1 */
    size_t nslots;
    Key *keys;
    size_t count, cap;
} Intern;

int grow_put(Grow *g, const void *src, size_t n); /* 0: no memory */
int32_t intern(Intern *t, const unsigned char *s, size_t n); /* the id of s[0:n]; -1: no memory */

#endif
