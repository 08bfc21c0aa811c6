/* One element of traceEvents read into Fields: see event.h. */
#include "event.h"

#include <math.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n;
} Name;
#define NAME(lit) {lit, sizeof(lit) - 1}

/* The keys of an event read into Fields (order: read_event's switch). */
static const Name KEYS[] = {NAME("ph"),  NAME("name"), NAME("cat"), NAME("ts"),
                            NAME("dur"), NAME("pid"),  NAME("tid"), NAME("args")};
/* The args read, in one table: the numeric ones into C_ARG0.. (order:
 * profkit.trace.native.ARG_FIELDS), then those kept as raw JSON, interned, into C_RAW0..
 * (RAW_FIELDS), then "Sequence number", then the two that mark a collective. */
static const Name ARG_KEYS[] = {
    NAME("correlation"), NAME("External id"), NAME("stream"), NAME("device"),
    NAME("blocks per SM"), NAME("est. achieved occupancy %"), NAME("flops"), NAME("bytes"),
    NAME("Input Dims"), NAME("Input type"), NAME("Input Strides"), NAME("Concrete Inputs"),
    NAME("Sequence number"), NAME("Collective name"), NAME("In msg nelems"),
    NAME("Bytes"), NAME("Total Allocated"), NAME("Total Reserved"), NAME("Device Id"),
    NAME("Device Type"), NAME("Addr")}; /* an allocator sample's: M_BYTES.. */
enum {
    A_RAW0 = SCAN_NARGS,
    A_SEQ = A_RAW0 + SCAN_NRAW,
    A_COLL0,
    A_MEM0 = A_COLL0 + 2,
    A_COUNT = A_MEM0 + SCAN_NMEMARGS
};
_Static_assert(sizeof ARG_KEYS / sizeof ARG_KEYS[0] == A_COUNT, "one name per arg read");
static const char SKIPPED_PHASES[] = "BEIbnestfPONDVvRc()"; /* traceevents.OTHER_PHASES */

/* The place of key k in names[0:count] (-1: none): length and first byte compared first. */
static int key_index(const JsString *k, const Name *names, int count) {
    if (k->n == 0) return -1;
    for (int i = 0; i < count; i++)
        if (names[i].n == k->n && (unsigned char)names[i].s[0] == k->s[0] &&
            memcmp(k->s, names[i].s, k->n) == 0)
            return i;
    return -1;
}

/* A number or null into *out (NaN for null); anything else declines the event. */
static int read_double(Scan *s, JsCursor *c, Fields *f, double *out) {
    if (js_peek(c) == 'n') {
        if (!js_is_literal(c, "null")) return c->bad = 1, 0;
        *out = NAN;
        return 1;
    }
    int ch = js_peek(c);
    if (ch != '-' && !(ch >= '0' && ch <= '9')) {
        f->decline = 1;
        return js_skip_value(c);
    }
    JsNumber num;
    if (!js_number(c, &num)) return 0;
    if (num.integer) {
        if (num.fits) *out = (double)num.value;
        else f->decline = 1;
    } else if (!js_fast_double(&num, out) &&
               (!s->to_double(num.s, num.n, out) || !isfinite(*out))) {
        f->decline = 1;
    }
    return 1;
}

/* A string (or null, n = SIZE_MAX) into *out; anything else declines the event. */
static int read_string(JsCursor *c, Fields *f, JsString *out) {
    if (js_peek(c) == '"') return js_string(c, out);
    if (js_peek(c) == 'n' && js_is_literal(c, "null")) {
        out->n = SIZE_MAX;
        return 1;
    }
    f->decline = 1;
    return js_skip_value(c);
}

/* The value at c when it is an integer within +-2**62 (into *out); anything else, read past,
 * sets *odd (a number of another form, or no number). 0: not JSON here. */
static int read_int(JsCursor *c, int64_t *out, int *odd) {
    int ch = js_peek(c);
    if (ch != '-' && !(ch >= '0' && ch <= '9')) {
        *odd = 1;
        return js_skip_value(c);
    }
    JsNumber num;
    if (!js_number(c, &num)) return 0;
    if (num.fits) *out = num.value;
    else *odd = 1;
    return 1;
}

/* pid / tid: an int within +-2**62 or a string; anything else (null too) declines. */
static int read_id(Scan *s, JsCursor *c, Fields *f, int which) {
    (void)s;
    if (js_peek(c) == '"') return js_string(c, &f->id_text[which]);
    return read_int(c, &f->id[which], &f->decline);
}

/* "Sequence number": an int within +-2**62 or null; anything else declines the event. */
static int read_seq(JsCursor *c, Fields *f) {
    if (js_peek(c) == 'n') {
        if (!js_is_literal(c, "null")) return c->bad = 1, 0;
        f->seq = SCAN_NO_SEQ;
        return 1;
    }
    return read_int(c, &f->seq, &f->decline);
}

/* An allocator sample's arg k: an integer within +-2**62 into f->mem[k]; anything else
 * (null, a fraction, text) marks the event for the Python reader (mem_odd). */
static int read_mem_arg(JsCursor *c, Fields *f, int k) {
    f->mem_seen |= 1u << k;
    return read_int(c, &f->mem[k], &f->mem_odd);
}

static int read_args(Scan *s, JsCursor *c, Fields *f) {
    if (js_peek(c) == 'n') {
        if (!js_is_literal(c, "null")) return c->bad = 1, 0;
        return 1;
    }
    if (js_peek(c) != '{') {
        f->decline = 1;
        return js_skip_value(c);
    }
    int empty, more;
    if (!js_open(c, '}', &empty)) return 0;
    if (empty) return 1;
    unsigned seen = 0;
    do {
        JsString key;
        if (!js_key(c, &key)) return 0;
        if (key.escaped) f->decline = 1; /* it may spell a key read below */
        int at = key_index(&key, ARG_KEYS, A_COUNT);
        int slot = at >= 0 && at < A_RAW0 ? at : -1;
        int raw = at >= A_RAW0 && at < A_SEQ ? at - A_RAW0 : -1;
        int seq = at == A_SEQ, coll = at > A_SEQ && at < A_MEM0;
        int mem = at >= A_MEM0 ? at - A_MEM0 : -1;
        unsigned bit = slot >= 0 ? 1u << slot : raw >= 0 ? 1u << (SCAN_NARGS + raw)
                     : seq ? 1u << (SCAN_NARGS + SCAN_NRAW)
                     : mem >= 0 ? 1u << (SCAN_NARGS + SCAN_NRAW + 1 + mem) : 0;
        if (bit & seen) f->decline = 1; /* a repeated key: the decoder keeps one of them */
        seen |= bit;
        if (slot >= 0) {
            if (!read_double(s, c, f, &f->args[slot])) return 0;
        } else if (raw >= 0) {
            const unsigned char *start = c->p;
            if (!js_skip_value(c)) return 0;
            f->raw[raw] = start;
            f->raw_n[raw] = (size_t)(c->p - start);
        } else if (seq) {
            if (!read_seq(c, f)) return 0;
        } else if (mem >= 0) {
            if (!read_mem_arg(c, f, mem)) return 0;
        } else if (coll) {
            if (!js_is_literal(c, "null")) {
                f->coll = 1;
                if (!js_skip_value(c)) return 0;
            }
        } else if (!js_skip_value(c)) {
            return 0;
        }
    } while ((more = js_next(c, '}')) > 0);
    return more == 0;
}

static int name_is(const JsString *str, const char *text) {
    return str->n != SIZE_MAX && !str->escaped && key_is(str, text);
}

/* Whether the instant in f is an allocator sample of the plain form (EV_MEMORY): its name,
 * a number for ts, an int or text tid, and the five args Kineto always writes (Addr too, if
 * any) as integers. */
static int plain_memory(const JsCursor *c, const Fields *f, int has_tid) {
    const unsigned every = (1u << SCAN_NMEMARGS) - 1, addr = 1u << (SCAN_NMEMARGS - 1);
    return !f->decline && !c->odd_number && has_tid && !isnan(f->ts) && !f->mem_odd &&
           (f->mem_seen | addr) == every &&
           (name_is(&f->name, "[memory]") || name_is(&f->name, "[OutOfMemory]"));
}

int read_event(Scan *s, JsCursor *c, Fields *f) {
    memset(f, 0, sizeof *f);
    f->name.n = f->cat.n = SIZE_MAX;
    f->ts = f->dur = NAN;
    f->seq = SCAN_NO_SEQ;
    f->mem[SCAN_NMEMARGS - 1] = -1; /* Addr absent (memorysamples.ADDR_ABSENT) */
    for (int i = 0; i < SCAN_NARGS; i++) f->args[i] = NAN;
    int has_id[2] = {0, 0};
    c->odd_number = 0;
    int empty, more;
    if (!js_open(c, '}', &empty)) return -1;
    if (empty) return EV_OTHER;
    unsigned seen = 0;
    int ph_twice = 0;
    do {
        JsString key;
        if (!js_key(c, &key)) return -1;
        int which = key_index(&key, KEYS, 8);
        if (key.escaped) f->decline = ph_twice = 1;
        if (which >= 0 && (seen >> which) & 1) f->decline = 1;
        if (which == 0 && (seen & 1)) ph_twice = 1;
        if (which >= 0) seen |= 1u << which;
        int ok;
        switch (which) {
        case 0:
            f->has_ph = js_peek(c) == '"';
            ok = read_string(c, f, &f->ph);
            f->has_ph = f->has_ph && !f->ph.escaped;
            break;
        case 1: ok = read_string(c, f, &f->name); break;
        case 2: ok = read_string(c, f, &f->cat); break;
        case 3: ok = read_double(s, c, f, &f->ts); break;
        case 4: ok = read_double(s, c, f, &f->dur); break;
        case 5:
        case 6:
            has_id[which - 5] = 1;
            ok = read_id(s, c, f, which - 5);
            break;
        case 7: ok = read_args(s, c, f); break;
        default: ok = js_skip_value(c);
        }
        if (!ok) return -1;
    } while ((more = js_next(c, '}')) > 0);
    if (more < 0) return -1;
    if (!f->has_ph || ph_twice) return EV_OTHER;
    if (f->ph.n == 1 && f->ph.s[0] != 0 && strchr(SKIPPED_PHASES, f->ph.s[0])) return EV_SKIP;
    if (f->ph.n == 1 && f->ph.s[0] == 'i')
        return plain_memory(c, f, has_id[1]) ? EV_MEMORY : EV_OTHER;
    if (f->ph.n != 1 || f->ph.s[0] != 'X') return EV_OTHER;
    if (f->decline || c->odd_number || !has_id[0] || !has_id[1]) return EV_OTHER;
    return EV_FAST;
}
