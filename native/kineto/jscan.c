/* Bounds-checked strict JSON scanning: see jscan.h. */
#include "jscan.h"

#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

static int fail(JsCursor *c) {
    c->bad = 1;
    return 0;
}


static int hex_value(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* The 4 hex digits at s (s + 4 <= end checked by the caller), or -1. */
static long hex4(const unsigned char *s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(s[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

int js_string(JsCursor *c, JsString *out) {
    if (!js_expect(c, '"')) return 0;
    const unsigned char *start = c->p;
    int escaped = 0;
    for (;;) {
#ifdef __SSE2__
        /* sixteen bytes at a time while sixteen remain: stop at a quote, backslash or
         * control character */
        const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'),
                      low = _mm_set1_epi8(0x1F);
        while (c->end - c->p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)c->p);
            __m128i hit = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash));
            hit = _mm_or_si128(hit, _mm_cmpeq_epi8(_mm_max_epu8(v, low), low));
            int mask = _mm_movemask_epi8(hit);
            if (mask) {
                c->p += __builtin_ctz((unsigned)mask);
                break;
            }
            c->p += 16;
        }
#endif
        while (c->p < c->end && *c->p >= 0x20 && *c->p != '"' && *c->p != '\\') c->p++;
        if (c->p >= c->end) break;
        unsigned char ch = *c->p;
        if (ch == '"') {
            out->s = start;
            out->n = (size_t)(c->p - start);
            out->escaped = escaped;
            c->p++;
            return 1;
        }
        if (ch < 0x20) return fail(c); /* a raw control character: not JSON */
        if (ch == '\\') {
            escaped = 1;
            if (c->end - c->p < 2) return fail(c);
            unsigned char e = c->p[1];
            if (e == 'u') {
                if (c->end - c->p < 6) return fail(c);
                long v = hex4(c->p + 2);
                /* surrogates (paired or not) are left to the Python reader */
                if (v < 0 || (v >= 0xD800 && v <= 0xDFFF)) return fail(c);
                c->p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return fail(c);
            c->p += 2;
            continue;
        }
        c->p++;
    }
    return fail(c); /* the file ends inside the string */
}

static int is_digit(const unsigned char *p, const unsigned char *end) {
    return p < end && *p >= '0' && *p <= '9';
}

/* One pass over the number's text: its integer value when it is one, and the digits
 * js_fast_double needs. */
int js_number(JsCursor *c, JsNumber *out) {
    const uint64_t exact = UINT64_C(1) << 53, big = UINT64_C(1) << 62;
    const unsigned char *p = c->p, *end = c->end, *start = p;
    int negative = 0, integer = 1, fits = 1, digits = 0, frac = 0, simple = 1;
    uint64_t mag = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (!is_digit(p, end)) return c->p = p, fail(c);
    if (*p == '0') {
        p++;
        digits = 1;
        if (is_digit(p, end)) return c->p = p, fail(c); /* a leading zero: not JSON */
    } else {
        for (; is_digit(p, end); p++, digits++) {
            if (mag > big / 10) fits = 0;
            else mag = mag * 10 + (unsigned)(*p - '0');
        }
    }
    if (mag > big) fits = 0;
    uint64_t m = mag; /* the digits so far as one integer, while it stays exact */
    if (!fits || m > exact) simple = 0;
    if (p < end && *p == '.') {
        integer = 0;
        p++;
        if (!is_digit(p, end)) return c->p = p, fail(c);
        for (; is_digit(p, end); p++) {
            if (!simple) continue;
            m = m * 10 + (unsigned)(*p - '0');
            if (m > exact || ++frac > 22) simple = 0;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = 0;
        simple = 0;
        c->odd_number = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (!is_digit(p, end)) return c->p = p, fail(c);
        while (is_digit(p, end)) p++;
    }
    c->p = p;
    if (digits > 18 || p - start > 40) c->odd_number = 1;
    out->s = start;
    out->n = (size_t)(p - start);
    out->integer = integer;
    out->fits = integer && fits;
    out->value = out->fits ? (negative ? -(int64_t)mag : (int64_t)mag) : 0;
    out->simple = simple;
    out->negative = negative;
    out->frac = frac;
    out->digits = m;
    return 1;
}

int js_is_literal(JsCursor *c, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0) return 0;
    c->p += n;
    return 1;
}

static int skip_container(JsCursor *c, unsigned char open) {
    unsigned char close = open == '[' ? ']' : '}';
    int empty, more;
    if (!js_open(c, close, &empty)) return 0;
    if (empty) return 1;
    do {
        JsString key;
        if (open == '{' && !js_key(c, &key)) return 0;
        if (!js_skip_value(c)) return 0;
    } while ((more = js_next(c, close)) > 0);
    return more == 0;
}

int js_skip_value(JsCursor *c) {
    int ch = js_peek(c);
    switch (ch) {
    case '"': {
        JsString s;
        return js_string(c, &s);
    }
    case '{':
    case '[':
        return skip_container(c, (unsigned char)ch);
    case 't':
        return js_is_literal(c, "true") || fail(c);
    case 'f':
        return js_is_literal(c, "false") || fail(c);
    case 'n':
        return js_is_literal(c, "null") || fail(c);
    default: {
        JsNumber num;
        return js_number(c, &num);
    }
    }
}

/* Append the UTF-8 of code point v (< 0xD800 or in 0xE000..0xFFFF) to out. */
static int put_utf8(long v, char *out, size_t cap, size_t *len) {
    unsigned char buf[3];
    size_t n;
    if (v < 0x80) {
        buf[0] = (unsigned char)v;
        n = 1;
    } else if (v < 0x800) {
        buf[0] = (unsigned char)(0xC0 | (v >> 6));
        buf[1] = (unsigned char)(0x80 | (v & 0x3F));
        n = 2;
    } else {
        buf[0] = (unsigned char)(0xE0 | (v >> 12));
        buf[1] = (unsigned char)(0x80 | ((v >> 6) & 0x3F));
        buf[2] = (unsigned char)(0x80 | (v & 0x3F));
        n = 3;
    }
    if (cap - *len < n) return 0;
    memcpy(out + *len, buf, n);
    *len += n;
    return 1;
}

int js_unescape(const JsString *str, char *out, size_t cap, size_t *len) {
    /* str was checked by js_string: every escape is complete and no surrogate */
    *len = 0;
    size_t i = 0;
    while (i < str->n) {
        unsigned char ch = str->s[i];
        if (ch != '\\') {
            if (*len >= cap) return 0;
            out[(*len)++] = (char)ch;
            i++;
            continue;
        }
        if (i + 1 >= str->n) return 0;
        unsigned char e = str->s[i + 1];
        if (e == 'u') {
            if (i + 6 > str->n) return 0;
            long v = hex4(str->s + i + 2);
            if (v < 0 || (v >= 0xD800 && v <= 0xDFFF)) return 0;
            if (!put_utf8(v, out, cap, len)) return 0;
            i += 6;
            continue;
        }
        char plain;
        switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        default: return 0;
        }
        if (*len >= cap) return 0;
        out[(*len)++] = plain;
        i += 2;
    }
    return 1;
}

/* A decimal number whose digits make an integer up to 2**53 and a power of ten up to 22
 * are both exact as doubles, and so is the power: one multiplication or division rounds once,
 * correctly (Clinger's fast path). Other numbers are left to a full parser. */
int js_fast_double(const JsNumber *num, double *out) {
    static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (!num->simple) return 0;
    double v = (double)num->digits;
    if (num->frac) v /= POW10[num->frac];
    *out = num->negative ? -v : v;
    return 1;
}

/* Whether s[0:n] is UTF-8 that Python's strict "utf-8" codec decodes: no overlong forms,
 * no surrogates (U+D800..U+DFFF), nothing past U+10FFFF, no sequence cut at the end. */
int js_valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
#ifdef __SSE2__
        /* sixteen ASCII bytes at a time (no byte with its high bit set) */
        while (n - i >= 16 &&
               !_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(const void *)(s + i))))
            i += 16;
        if (i == n) break;
#endif
        if (n - i >= 8) { /* eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & UINT64_C(0x8080808080808080))) {
                i += 8;
                continue;
            }
        }
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (b >= 0xC2 && b <= 0xDF) {
            len = 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            len = 3;
            if (b == 0xE0) lo = 0xA0;      /* overlong */
            else if (b == 0xED) hi = 0x9F; /* surrogates */
        } else if (b >= 0xF0 && b <= 0xF4) {
            len = 4;
            if (b == 0xF0) lo = 0x90;      /* overlong */
            else if (b == 0xF4) hi = 0x8F; /* past U+10FFFF */
        } else {
            return 0;
        }
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += len;
    }
    return 1;
}
