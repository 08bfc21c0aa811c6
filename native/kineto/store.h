/* Growable byte buffers and intern tables of byte strings (every size checked before use).
 * An intern table keeps its own copy of each distinct string (the scanned window is gone by
 * the next feed), addressed by offset: its arena moves as it grows. */
#ifndef PROFKIT_STORE_H
#define PROFKIT_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data;
    size_t len, cap;
} Grow;

typedef struct {
    size_t off, n; /* the string is arena.data[off:off + n] */
} Key;

typedef struct {
    uint32_t *slots; /* 0: empty, else id + 1 */
    size_t nslots;
    Key *keys;
    size_t count, cap;
    Grow arena; /* the strings' bytes, one after another */
} Intern;

int grow_put(Grow *g, const void *src, size_t n); /* 0: no memory */

/* grow_put inlined where it fits (the columns' one value per event: a fixed-size copy the
 * compiler turns into one store); a buffer that must grow takes the call. */
static inline int grow_put_small(Grow *g, const void *src, size_t n) {
    if (g->cap - g->len < n) return grow_put(g, src, n);
    memcpy(g->data + g->len, src, n);
    g->len += n;
    return 1;
}
void grow_free(Grow *g);
int32_t intern(Intern *t, const unsigned char *s, size_t n); /* the id of s[0:n]; -1: no memory */
void intern_free(Intern *t);

static inline const unsigned char *intern_bytes(const Intern *t, size_t id) {
    return (const unsigned char *)t->arena.data + t->keys[id].off;
}

#endif
