/* Growable buffers and intern tables: see store.h. */
#include "store.h"

#include <stdlib.h>
#include <string.h>


int grow_put(Grow *g, const void *src, size_t n) {
    if (g->cap - g->len < n) {
        size_t cap = g->cap ? g->cap : 4096;
        while (cap - g->len < n) {
            if (cap > SIZE_MAX / 2) return 0;
            cap *= 2;
        }
        char *data = realloc(g->data, cap);
        if (!data) return 0;
        g->data = data;
        g->cap = cap;
    }
    if (n) memcpy(g->data + g->len, src, n);
    g->len += n;
    return 1;
}

void grow_free(Grow *g) {
    free(g->data);
    g->data = NULL;
    g->len = g->cap = 0;
}

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* eight bytes at a time (memcpy: no unaligned read) */
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 0x100000001B3ULL;
    return h ^ (h >> 29);
}

static int intern_rehash(Intern *t, size_t nslots) {
    uint32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) return 0;
    for (size_t id = 0; id < t->count; id++) {
        size_t at = hash_bytes(intern_bytes(t, id), t->keys[id].n) & (nslots - 1);
        while (slots[at]) at = (at + 1) & (nslots - 1);
        slots[at] = (uint32_t)(id + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 1;
}

/* The id of bytes s[0:n], copied in when new; -1 on no memory. */
int32_t intern(Intern *t, const unsigned char *s, size_t n) {
    if (t->count >= INT32_MAX - 1) return -1;
    if ((t->count + 1) * 2 > t->nslots && !intern_rehash(t, t->nslots ? t->nslots * 2 : 1024))
        return -1;
    size_t at = hash_bytes(s, n) & (t->nslots - 1);
    while (t->slots[at]) {
        size_t id = t->slots[at] - 1;
        if (t->keys[id].n == n && memcmp(intern_bytes(t, id), s, n) == 0) return (int32_t)id;
        at = (at + 1) & (t->nslots - 1);
    }
    if (t->count == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        Key *keys = realloc(t->keys, cap * sizeof *keys);
        if (!keys) return -1;
        t->keys = keys;
        t->cap = cap;
    }
    size_t off = t->arena.len;
    if (!grow_put(&t->arena, s, n)) return -1;
    t->keys[t->count].off = off;
    t->keys[t->count].n = n;
    t->slots[at] = (uint32_t)(t->count + 1);
    return (int32_t)t->count++;
}

void intern_free(Intern *t) {
    free(t->slots);
    free(t->keys);
    grow_free(&t->arena);
    memset(t, 0, sizeof *t);
}
