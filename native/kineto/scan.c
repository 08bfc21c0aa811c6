/* One pass over a Kineto trace into event columns, fed in pieces: see scan.h. */
#include "scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "jscan.h"
#include "store.h"

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

/* ---- what an event puts ---- */

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
