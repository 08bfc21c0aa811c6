/* One pass over a Kineto trace into event columns, fed in pieces: see scan.h. */
#include "scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jscan.h"
#include "store.h"

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

void scan_init(Scan *s, ScanToDouble to_double) {
    memset(s, 0, sizeof *s);
    s->to_double = to_double;
}

void scan_free(Scan *s) {
    for (int i = 0; i < SCAN_NCOLS; i++) grow_free(&s->col[i]);
    for (int i = 0; i < SCAN_NMEM; i++) grow_free(&s->mem[i]);
    for (int i = 0; i < SCAN_NOTHER; i++) grow_free(&s->other[i]);
    for (int i = 0; i < SCAN_NCOLL; i++) grow_free(&s->coll[i]);
    grow_free(&s->kept);
    grow_free(&s->head);
    intern_free(&s->strings);
    intern_free(&s->raw);
    memset(s, 0, sizeof *s);
}

/* ---- one event ---- */

typedef struct {
    int decline;          /* a field profkit reads has an unusual form: the event is "other" */
    JsString ph;
    int has_ph;
    JsString name, cat;   /* n == SIZE_MAX: absent or null */
    double ts, dur;
    int64_t id[2];        /* pid, tid */
    JsString id_text[2];  /* s != NULL: the id is text */
    double args[SCAN_NARGS];
    const unsigned char *raw[SCAN_NRAW]; /* NULL: absent */
    size_t raw_n[SCAN_NRAW];
    int coll;
    int64_t seq;
    int64_t mem[SCAN_NMEMARGS]; /* an allocator sample's args, each plain integer read */
    unsigned mem_seen;          /* bit k: mem[k] was read */
    int mem_odd;                /* one of them is no integer within +-2**62 */
} Fields;

static int key_is(const JsString *k, const char *name) {
    size_t n = strlen(name);
    return k->n == n && memcmp(k->s, name, n) == 0;
}

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

enum { EV_FAST, EV_SKIP, EV_OTHER, EV_MEMORY };

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

/* Parse the object at c (an element of traceEvents) into f; the event's class, or -1. */
static int read_event(Scan *s, JsCursor *c, Fields *f) {
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

static int put_string_id(Scan *s, const JsString *str, int32_t *id) {
    *id = -1;
    if (str->n == SIZE_MAX || str->s == NULL) return 1;
    *id = intern(&s->strings, str->s, str->n);
    return *id >= 0;
}

/* The bytes of one event into kept; its span there into the two buffers spans[0:2]. */
static int keep(Scan *s, Grow *spans, const unsigned char *from, const unsigned char *to) {
    int64_t start = (int64_t)s->kept.len, end = start + (to - from);
    return grow_put(&s->kept, from, (size_t)(to - from)) &&
           grow_put_small(&spans[0], &start, 8) && grow_put_small(&spans[1], &end, 8);
}

static int put_fast(Scan *s, const Fields *f, int64_t index, const unsigned char *from,
                    const unsigned char *to) {
    int32_t name, cat, pid_s, tid_s, raw[SCAN_NRAW];
    uint8_t coll = (uint8_t)f->coll;
    if (!put_string_id(s, &f->name, &name) || !put_string_id(s, &f->cat, &cat) ||
        !put_string_id(s, &f->id_text[0], &pid_s) || !put_string_id(s, &f->id_text[1], &tid_s))
        return 0;
    for (int i = 0; i < SCAN_NRAW; i++) {
        raw[i] = -1;
        if (f->raw[i] && (raw[i] = intern(&s->raw, f->raw[i], f->raw_n[i])) < 0) return 0;
    }
    Grow *col = s->col;
    int ok = grow_put_small(&col[C_INDEX], &index, 8) && grow_put_small(&col[C_TS], &f->ts, 8) &&
             grow_put_small(&col[C_DUR], &f->dur, 8) && grow_put_small(&col[C_NAME], &name, 4) &&
             grow_put_small(&col[C_CAT], &cat, 4) && grow_put_small(&col[C_PID], &f->id[0], 8) &&
             grow_put_small(&col[C_TID], &f->id[1], 8) &&
             grow_put_small(&col[C_PID_S], &pid_s, 4) &&
             grow_put_small(&col[C_TID_S], &tid_s, 4) && grow_put_small(&col[C_COLL], &coll, 1) &&
             grow_put_small(&col[C_SEQ], &f->seq, 8);
    for (int i = 0; ok && i < SCAN_NARGS; i++)
        ok = grow_put_small(&col[C_ARG0 + i], &f->args[i], 8);
    for (int i = 0; ok && i < SCAN_NRAW; i++) ok = grow_put_small(&col[C_RAW0 + i], &raw[i], 4);
    return ok && (!coll || keep(s, s->coll, from, to));
}

static int put_memory(Scan *s, const Fields *f, int64_t index) {
    int32_t tid_s;
    uint8_t oom = f->name.n == sizeof "[OutOfMemory]" - 1;
    if (!put_string_id(s, &f->id_text[1], &tid_s)) return 0;
    Grow *m = s->mem;
    int ok = grow_put_small(&m[M_INDEX], &index, 8) && grow_put_small(&m[M_TS], &f->ts, 8) &&
             grow_put_small(&m[M_TID], &f->id[1], 8) &&
             grow_put_small(&m[M_TID_S], &tid_s, 4) && grow_put_small(&m[M_OOM], &oom, 1);
    for (int i = 0; ok && i < SCAN_NMEMARGS; i++)
        ok = grow_put_small(&m[M_BYTES + i], &f->mem[i], 8);
    return ok;
}

static int put_other(Scan *s, int64_t index, const unsigned char *from, const unsigned char *to) {
    return grow_put_small(&s->other[O_INDEX], &index, 8) && keep(s, &s->other[O_START], from, to);
}

/* ---- the document, one unit at a time ----
 *
 * A unit is what the scanner reads and keeps in one go: the root's opening, one top-level
 * member (key and value, or the key of traceEvents and its '['), one element of traceEvents
 * with the ',' or ']' after it, or the ',' / '}' after traceEvents. A unit is kept only when
 * the window holds it whole and at least one byte after it (so that no decision was made at
 * the window's end); else the feed stops before it and the caller feeds it again with more. */

enum { ST_START, ST_MEMBER, ST_ELEM, ST_AFTER_EVENTS, ST_END };
enum { U_OK, U_FAIL, U_DECLINE, U_NO_MEMORY }; /* U_FAIL: not JSON here, or the window ended */

typedef struct {
    int next;                 /* the state after the unit */
    int cls;                  /* ST_ELEM: the element's class (EV_*) */
    Fields f;                 /* ST_ELEM, EV_FAST: its fields */
    const unsigned char *bracket; /* ST_MEMBER of traceEvents: its '[' */
    int empty;                /* ... and whether the array closed at once */
} Unit;

static int unit_start(Scan *s, JsCursor *c, Unit *u) {
    js_skip_ws(c);
    int ch = js_peek(c), empty;
    if (ch != '[' && ch != '{') return ch < 0 ? U_FAIL : U_DECLINE;
    s->root_array = ch == '[';
    if (!js_open(c, ch == '[' ? ']' : '}', &empty)) return U_FAIL;
    if (ch == '{' && empty) return U_DECLINE; /* no traceEvents */
    u->next = ch == '{' ? ST_MEMBER : empty ? ST_END : ST_ELEM;
    return U_OK;
}

static int unit_member(JsCursor *c, Unit *u) {
    JsString key;
    if (!js_key(c, &key)) return U_FAIL;
    if (key.escaped) return U_DECLINE; /* it may spell traceEvents */
    if (!key_is(&key, "traceEvents")) {
        if (!js_skip_value(c)) return U_FAIL;
        int more = js_next(c, '}');
        if (more < 0) return U_FAIL;
        u->next = more ? ST_MEMBER : ST_END;
        return U_OK;
    }
    int ch = js_peek(c);
    if (ch != '[') return ch < 0 ? U_FAIL : U_DECLINE;
    u->bracket = c->p;
    if (!js_open(c, ']', &u->empty)) return U_FAIL;
    u->next = u->empty ? ST_AFTER_EVENTS : ST_ELEM;
    return U_OK;
}

static int unit_elem(Scan *s, JsCursor *c, Unit *u) {
    u->cls = EV_OTHER;
    if (s->mode != SCAN_COLUMNS) { /* the element whole, as it is */
        if (s->mode == SCAN_CHECK) u->cls = EV_SKIP;
        return js_skip_value(c) ? U_OK : U_FAIL;
    }
    if (js_peek(c) == '{') {
        u->cls = read_event(s, c, &u->f);
        if (u->cls < 0) return U_FAIL;
    } else if (!js_skip_value(c)) {
        return U_FAIL;
    }
    return U_OK;
}

static int unit_after(JsCursor *c, Unit *u, unsigned char close, int closed_state) {
    int more = js_next(c, close);
    if (more < 0) return U_FAIL;
    u->next = more ? (close == ']' ? ST_ELEM : ST_MEMBER) : closed_state;
    return U_OK;
}

/* Keep a unit read from [from, c->p): its effects on the columns, kept bytes and head. */
static int commit(Scan *s, const Unit *u, const unsigned char *from, const unsigned char *elem_end,
                  const unsigned char *to) {
    switch (s->state) {
    case ST_START:
        return s->root_array || grow_put(&s->head, from, (size_t)(to - from));
    case ST_MEMBER:
        if (u->next == ST_ELEM || u->next == ST_AFTER_EVENTS) { /* the traceEvents key */
            if (s->events_seen) return -1;
            s->events_seen = 1;
            return grow_put(&s->head, from, (size_t)(u->bracket + 1 - from)) &&
                   (!u->empty || grow_put(&s->head, "]", 1));
        }
        return grow_put(&s->head, from, (size_t)(to - from));
    case ST_ELEM: {
        int64_t index = s->count++;
        if (u->cls == EV_FAST && !put_fast(s, &u->f, index, from, elem_end)) return 0;
        if (u->cls == EV_OTHER && !put_other(s, index, from, elem_end)) return 0;
        if (u->cls == EV_MEMORY && !put_memory(s, &u->f, index)) return 0;
        return u->next == ST_ELEM || s->root_array || grow_put(&s->head, "]", 1);
    }
    default: /* ST_AFTER_EVENTS */
        return grow_put(&s->head, from, (size_t)(to - from));
    }
}

int scan_feed(Scan *s, const unsigned char *buf, size_t n, int final, size_t *used) {
    const unsigned char *mark = buf; /* what is before it is read and kept */
    *used = 0;
    for (;;) {
        JsCursor c = {mark, buf + n, s->depth, 0, 0};
        if (s->state == ST_END) { /* only whitespace may follow the root */
            js_skip_ws(&c);
            if (c.p < c.end) return SCAN_DECLINED;
            mark = c.p;
            break;
        }
        Unit u;
        const unsigned char *elem_end = NULL;
        int rc;
        switch (s->state) {
        case ST_START: rc = unit_start(s, &c, &u); break;
        case ST_MEMBER: rc = unit_member(&c, &u); break;
        case ST_ELEM:
            rc = unit_elem(s, &c, &u);
            elem_end = c.p;
            if (rc == U_OK) rc = unit_after(&c, &u, ']', s->root_array ? ST_END : ST_AFTER_EVENTS);
            break;
        default: rc = unit_after(&c, &u, '}', ST_END);
        }
        if (rc == U_DECLINE) return SCAN_DECLINED;
        if (rc == U_FAIL || c.bad || (c.p >= c.end && !final)) {
            if (final) return SCAN_DECLINED;
            break; /* the window ends inside this unit: fed again with more */
        }
        int kept = commit(s, &u, mark, elem_end, c.p);
        if (kept < 0) return SCAN_DECLINED; /* a second traceEvents */
        if (!kept) return SCAN_NO_MEMORY;
        s->state = u.next;
        s->depth = c.depth;
        mark = c.p;
    }
    if (!js_valid_utf8(buf, (size_t)(mark - buf))) return SCAN_DECLINED;
    *used = (size_t)(mark - buf);
    return final && !scan_done(s) ? SCAN_DECLINED : SCAN_OK; /* no traceEvents: declined */
}

int scan_buffer(Scan *s, const unsigned char *buf, size_t n) {
    size_t used;
    return scan_feed(s, buf, n, 1, &used);
}

int scan_done(const Scan *s) { return s->state == ST_END && (s->root_array || s->events_seen); }
