/* A mutation fuzzer for the native Kineto scanner (scan.c, jscan.c), without Python.
 *
 *   gcc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
 *       native/kineto/fuzz_scan.c native/kineto/scan.c native/kineto/store.c \
 *       native/kineto/jscan.c -lm -o fuzz_scan
 *   ./fuzz_scan SECONDS SEED [--save DIR N] FILE...
 *
 * Each FILE (a small trace, plain JSON) is a seed. Every run copies one mutated input into a
 * buffer of exactly its size (so AddressSanitizer sees any read past its end), scans it, and
 * unescapes every string the scan kept. A sanitizer report aborts with a non-zero exit; at
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
        JsString str = {k->s, k->n, 1};
        size_t len;
        if (!js_unescape(&str, tmp, cap, &len) || len > k->n) abort();
    }
    free(tmp);
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
