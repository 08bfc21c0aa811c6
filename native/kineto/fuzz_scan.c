/* A mutation fuzzer for the native Kineto scanner (scan.c, event.c, jscan.c), without Python.
 *
 *   gcc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
 *       native/kineto/fuzz_scan.c native/kineto/scan.c native/kineto/event.c \
 *       native/kineto/store.c native/kineto/jscan.c -lm -o fuzz_scan
 *   ./fuzz_scan SECONDS SEED [--save DIR N] FILE...
 *
 * Each FILE (a small trace, plain JSON) is a seed. Every run copies one mutated input into a
 * buffer of exactly its size (so AddressSanitizer sees any read past its end), scans it, and
 * unescapes every string the scan kept; then it feeds the same input in pieces of random
 * sizes (each window again in a buffer of exactly its size), as profkit.trace.native
 * scan_pieces does, and checks that the two scans accept or decline alike and give the same
 * columns, kept bytes, head and strings, byte for byte; and that merge's check scan accepts
 * alike and its split, read whole or in pieces drained window by window, gives every element. A sanitizer report aborts with a non-zero exit; at
 * the end it prints the executions, the time and how many inputs the scanner accepted or
 * declined. --save DIR N writes N accepted inputs (spread over the run) to DIR, for the
 * Python identity test's fuzz corpus. libFuzzer needs clang, which these machines lack;
 * this driver needs only gcc. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jscan.h"
#include "scan.h"

static uint64_t rng_state;

static uint64_t rnd(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

static int plain_double(const unsigned char *s, size_t n, double *out) {
    char text[64];
    if (n == 0 || n >= sizeof text) return 0;
    memcpy(text, s, n);
    text[n] = 0;
    char *end;
    *out = strtod(text, &end);
    return end == text + n;
}

static const char *const TOKENS[] = {
    "{", "}", "[", "]", ",", ":", "\"", "\\", "\\u00e9", "\\ud800", "\\n", "null", "true",
    "-", "0", "1e400", "-0", "1.5", "9223372036854775807", "18446744073709551616", "\"ph\":\"X\"",
    "\"ph\":\"f\"", "\"ph\":\"M\"", "\"name\":", "\"cat\":\"kernel\"", "\"ts\":", "\"dur\":",
    "\"pid\":", "\"tid\":\"stream 7\"", "\"args\":{", "\"correlation\":", "\"Input Dims\":[[",
    "\"Collective name\":\"allreduce\"", "\"External id\":", " ", "\x01", "\xff", "\xc3\xa9"};

typedef struct {
    unsigned char *data;
    size_t len;
} Bytes;

static Bytes read_file(const char *path) {
    Bytes b = {NULL, 0};
    FILE *f = fopen(path, "rb");
    if (!f) return b;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n > 0 && (b.data = malloc((size_t)n))) b.len = fread(b.data, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* One mutation of in (len n) into out (capacity cap); the new length. */
static size_t mutate(const Bytes *seeds, int nseeds, const unsigned char *in, size_t n,
                     unsigned char *out, size_t cap) {
    size_t len = n < cap ? n : cap;
    memcpy(out, in, len);
    int rounds = 1 + (int)below(4);
    for (int r = 0; r < rounds; r++) {
        size_t at = below(len + 1);
        switch (below(7)) {
        case 0: /* flip a bit */
            if (len) out[below(len)] ^= (unsigned char)(1u << below(8));
            break;
        case 1: /* set a byte to a JSON-significant one */
            if (len) out[below(len)] = (unsigned char)"{}[],:\"\\-0.eEnul \x01"[below(17)];
            break;
        case 2: { /* insert a token */
            const char *t = TOKENS[below(sizeof TOKENS / sizeof *TOKENS)];
            size_t tn = strlen(t);
            if (len + tn > cap) break;
            memmove(out + at + tn, out + at, len - at);
            memcpy(out + at, t, tn);
            len += tn;
            break;
        }
        case 3: { /* delete a run */
            size_t k = below(len - at + 1) % 64;
            memmove(out + at, out + at + k, len - at - k);
            len -= k;
            break;
        }
        case 4: { /* duplicate a run */
            size_t from = below(len + 1), k = below(len - from + 1) % 256;
            if (len + k > cap) break;
            memmove(out + at + k, out + at, len - at);
            memmove(out + at, out + (from <= at ? from : from + k), k);
            len += k;
            break;
        }
        case 5: { /* splice in a run of another seed */
            const Bytes *o = &seeds[below((size_t)nseeds)];
            size_t from = below(o->len + 1), k = below(o->len - from + 1) % 512;
            if (len + k > cap) break;
            memmove(out + at + k, out + at, len - at);
            memcpy(out + at, o->data + from, k);
            len += k;
            break;
        }
        default: /* truncate */
            len = at;
        }
    }
    return len;
}

static void check(const Scan *s) {
    /* every kept string unescapes within its own length (js_unescape never lengthens) */
    char *tmp = malloc(1);
    size_t cap = 1;
    for (size_t i = 0; i < s->strings.count; i++) {
        const Key *k = &s->strings.keys[i];
        if (k->n + 1 > cap) {
            cap = k->n + 1;
            tmp = realloc(tmp, cap);
            if (!tmp) abort();
        }
        JsString str = {intern_bytes(&s->strings, i), k->n, 1};
        size_t len;
        if (!js_unescape(&str, tmp, cap, &len) || len > k->n) abort();
    }
    free(tmp);
}

/* The input fed in pieces of 1..64 bytes, a window that makes no progress retried once it
 * has doubled (profkit.trace.native.scan_pieces). */
static int scan_in_pieces(Scan *s, const unsigned char *in, size_t len, Grow *drained) {
    unsigned char *window = malloc(len + 1);
    size_t wlen = 0, pos = 0, want = 1, used = 0;
    int rc = SCAN_OK;
    if (!window) abort();
    while (pos < len && rc == SCAN_OK) {
        size_t k = 1 + below(64);
        if (k > len - pos) k = len - pos;
        memcpy(window + wlen, in + pos, k);
        wlen += k;
        pos += k;
        if (wlen < want) continue;
        unsigned char *exact = malloc(wlen);
        memcpy(exact, window, wlen);
        rc = scan_feed(s, exact, wlen, 0, &used);
        free(exact);
        if (rc != SCAN_OK) break;
        if (drained) { /* SCAN_SPLIT: take the elements' bytes, as _kineto.drain does */
            if (!grow_put(drained, s->kept.data, s->kept.len)) abort();
            s->kept.len = 0;
        }
        if (used > wlen) abort();
        want = used == 0 ? 2 * wlen : 1;
        memmove(window, window + used, wlen - used);
        wlen -= used;
    }
    if (rc == SCAN_OK) {
        unsigned char *exact = malloc(wlen ? wlen : 1);
        memcpy(exact, window, wlen);
        rc = scan_feed(s, exact, wlen, 1, &used);
        free(exact);
        if (rc == SCAN_OK && drained && !grow_put(drained, s->kept.data, s->kept.len)) abort();
    }
    free(window);
    return rc;
}

static int same_grow(const Grow *a, const Grow *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static int same_intern(const Intern *a, const Intern *b) {
    if (a->count != b->count) return 0;
    for (size_t i = 0; i < a->count; i++)
        if (a->keys[i].n != b->keys[i].n ||
            memcmp(intern_bytes(a, i), intern_bytes(b, i), a->keys[i].n) != 0)
            return 0;
    return 1;
}

static int same_scan(const Scan *a, const Scan *b) {
    int same = a->count == b->count && a->root_array == b->root_array &&
               same_grow(&a->kept, &b->kept) && same_grow(&a->head, &b->head) &&
               same_intern(&a->strings, &b->strings) && same_intern(&a->raw, &b->raw);
    for (int i = 0; same && i < SCAN_NCOLS; i++) same = same_grow(&a->col[i], &b->col[i]);
    for (int i = 0; same && i < SCAN_NMEM; i++) same = same_grow(&a->mem[i], &b->mem[i]);
    for (int i = 0; same && i < SCAN_NOTHER; i++) same = same_grow(&a->other[i], &b->other[i]);
    for (int i = 0; same && i < SCAN_NCOLL; i++) same = same_grow(&a->coll[i], &b->coll[i]);
    return same;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: fuzz_scan SECONDS SEED [--save DIR N] FILE...\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    rng_state = strtoull(argv[2], NULL, 10) | 1;
    int first = 3, save_n = 0;
    const char *save_dir = NULL;
    if (argc > 5 && strcmp(argv[3], "--save") == 0) {
        save_dir = argv[4];
        save_n = atoi(argv[5]);
        first = 6;
    }
    int nseeds = 0;
    Bytes *seeds = calloc((size_t)argc, sizeof *seeds);
    for (int i = first; i < argc; i++) {
        Bytes b = read_file(argv[i]);
        if (b.len) seeds[nseeds++] = b;
    }
    if (!nseeds) {
        fprintf(stderr, "fuzz_scan: no readable seed\n");
        return 2;
    }
    size_t cap = 0;
    for (int i = 0; i < nseeds; i++)
        if (seeds[i].len > cap) cap = seeds[i].len;
    cap = cap * 2 + 4096;
    unsigned char *work = malloc(cap);
    long execs = 0, accepted = 0, declined = 0, saved = 0;
    clock_t start = clock();
    double elapsed = 0;
    while (elapsed < seconds) {
        const Bytes *seed = &seeds[below((size_t)nseeds)];
        size_t len = mutate(seeds, nseeds, seed->data, seed->len, work, cap);
        unsigned char *input = malloc(len ? len : 1); /* exactly len bytes: ASan sees overreads */
        memcpy(input, work, len);
        Scan s;
        scan_init(&s, plain_double);
        int rc = scan_buffer(&s, input, len);
        Scan fed;
        scan_init(&fed, plain_double);
        int fed_rc = scan_in_pieces(&fed, input, len, NULL);
        if (fed_rc != rc || (rc == SCAN_OK && !same_scan(&s, &fed))) {
            fprintf(stderr, "fuzz_scan: the input read whole and in pieces differ (%d, %d):\n", rc,
                    fed_rc);
            fwrite(input, 1, len, stderr);
            abort();
        }
        scan_free(&fed);
        /* merge's modes: a check accepts what the columns scan accepts, and a split fed in
         * pieces gives the bytes of every element of the split read whole */
        Scan checked, split, split_fed;
        scan_init(&checked, plain_double);
        scan_init(&split, plain_double);
        scan_init(&split_fed, plain_double);
        checked.mode = SCAN_CHECK;
        split.mode = split_fed.mode = SCAN_SPLIT;
        Grow drained = {NULL, 0, 0};
        int check_rc = scan_buffer(&checked, input, len);
        int split_rc = scan_buffer(&split, input, len);
        int split_fed_rc = scan_in_pieces(&split_fed, input, len, &drained);
        if (check_rc != rc || split_rc != rc || split_fed_rc != rc ||
            (rc == SCAN_OK && (checked.count != s.count || split.count != s.count ||
                               split_fed.count != s.count || !same_grow(&split.kept, &drained) ||
                               !same_grow(&split.head, &s.head)))) {
            fprintf(stderr, "fuzz_scan: the check or split scan differs (%d %d %d %d):\n", rc,
                    check_rc, split_rc, split_fed_rc);
            fwrite(input, 1, len, stderr);
            abort();
        }
        scan_free(&checked);
        scan_free(&split);
        scan_free(&split_fed);
        grow_free(&drained);
        if (rc == SCAN_OK) {
            accepted++;
            check(&s);
            if (save_dir && saved < save_n && below(200) == 0) {
                char path[4096];
                snprintf(path, sizeof path, "%s/fuzz_%03ld.json", save_dir, saved++);
                FILE *f = fopen(path, "wb");
                if (f) {
                    fwrite(input, 1, len, f);
                    fclose(f);
                }
            }
        } else {
            declined++;
        }
        scan_free(&s);
        free(input);
        execs++;
        if ((execs & 63) == 0) elapsed = (double)(clock() - start) / CLOCKS_PER_SEC;
    }
    elapsed = (double)(clock() - start) / CLOCKS_PER_SEC;
    printf("fuzz_scan: %ld executions in %.1f CPU s (%ld accepted, %ld declined), no crash\n",
           execs, elapsed, accepted, declined);
    for (int i = 0; i < nseeds; i++) free(seeds[i].data);
    free(seeds);
    free(work);
    return 0;
}
