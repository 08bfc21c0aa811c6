/* Bounds-checked JSON scanning over one buffer (no allocation, no Python).
 *
 * Every read goes through a cursor whose position is compared with the end of the buffer
 * before each byte is read. Nesting is capped at JS_MAX_DEPTH (the recursion depth of
 * js_skip_value), so no input can overflow the C stack. Anything this scanner does not
 * accept exactly as strict JSON (RFC 8259) sets `bad`; the caller then leaves the whole file
 * to the pure-Python reader, which gives the same error or repair it always did. */
#ifndef PROFKIT_JSCAN_H
#define PROFKIT_JSCAN_H

#include <stddef.h>
#include <stdint.h>

#define JS_MAX_DEPTH 64 /* profkit.trace.jsonrepair.MAX_JSON_DEPTH */

typedef struct {
    const unsigned char *p;   /* next byte to read */
    const unsigned char *end; /* one past the last byte */
    int depth;                /* containers open at p */
    int bad;                  /* set once: the input is no JSON this scanner accepts */
    int odd_number;           /* set by a number with an exponent or many digits */
} JsCursor;

typedef struct {
    const unsigned char *s; /* the string's bytes between its quotes (escapes undecoded) */
    size_t n;
    int escaped; /* holds a backslash escape */
} JsString;

typedef struct {
    const unsigned char *s; /* the number's text */
    size_t n;
    int integer;   /* no fraction and no exponent */
    int64_t value; /* integer: its value when it fits (fits set) */
    int fits;      /* integer within +-(2**62) */
    /* js_fast_double's case: no exponent, and the digits (fraction too) make an integer up
     * to 2**53 (digits) with at most 22 of them after the point (frac) */
    int simple, negative, frac;
    uint64_t digits;
} JsNumber;

static inline void js_skip_ws(JsCursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static inline int js_peek(const JsCursor *c) { return c->p < c->end ? *c->p : -1; } /* -1: end */

static inline int js_expect(JsCursor *c, unsigned char ch) { /* consume ch, or set bad */
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    c->bad = 1;
    return 0;
}

int js_string(JsCursor *c, JsString *out);           /* at '"' */
int js_number(JsCursor *c, JsNumber *out);           /* at '-' or a digit */
int js_fast_double(const JsNumber *num, double *out); /* exact cases only; 0: not one */
int js_skip_value(JsCursor *c);                      /* any value */
int js_is_literal(JsCursor *c, const char *lit);     /* consume true/false/null */
int js_unescape(const JsString *str, char *out, size_t cap, size_t *len); /* UTF-8 of str */
int js_valid_utf8(const unsigned char *s, size_t n); /* strict, as Python's "utf-8" codec */

/* The walk of an object or array, shared by every reader of one:
 *   js_open   at '{' or '[': consume it and count the depth (0, bad set, past JS_MAX_DEPTH);
 *             *empty is 1 when the container closes at once (its close consumed);
 *   js_key    an object member's key and its ':';
 *   js_next   after a member: 1 when another follows (',' consumed), 0 when the container
 *             closes (`close` consumed, depth counted down), -1 (bad set) on anything else. */
static inline int js_open(JsCursor *c, unsigned char close, int *empty) {
    if (++c->depth > JS_MAX_DEPTH) {
        c->bad = 1;
        return 0;
    }
    c->p++;
    js_skip_ws(c);
    *empty = js_peek(c) == close;
    if (*empty) {
        c->p++;
        c->depth--;
    }
    return 1;
}

static inline int js_key(JsCursor *c, JsString *key) {
    if (!js_string(c, key)) return 0;
    js_skip_ws(c);
    if (!js_expect(c, ':')) return 0;
    js_skip_ws(c);
    return 1;
}

static inline int js_next(JsCursor *c, unsigned char close) {
    js_skip_ws(c);
    int ch = js_peek(c);
    if (ch == ',') {
        c->p++;
        js_skip_ws(c);
        return 1;
    }
    if (ch == close) {
        c->p++;
        c->depth--;
        return 0;
    }
    c->bad = 1;
    return -1;
}

#endif
