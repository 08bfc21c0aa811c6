/* One element of traceEvents read into Fields (pure C, no Python): the keys profkit reads,
 * whether each has its plain form, and the event's class. scan.c keeps what it says. */
#ifndef PROFKIT_EVENT_H
#define PROFKIT_EVENT_H

#include <stdint.h>
#include <string.h>

#include "jscan.h"
#include "scan.h"

/* What read_event found of one event: the fields profkit reads, as the scanned bytes have
 * them (strings point into the window fed), and whether each has its plain form. */
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

/* An event's class: its columns (fast, memory), dropped (skip), or its bytes kept for the
 * Python reader (other). */
enum { EV_FAST, EV_SKIP, EV_OTHER, EV_MEMORY };

/* Parse the object at c (an element of traceEvents) into f; the event's class, or -1 (not
 * JSON here, or the window ends inside it). */
int read_event(Scan *s, JsCursor *c, Fields *f);

static inline int key_is(const JsString *k, const char *name) {
    size_t n = strlen(name);
    return k->n == n && memcmp(k->s, name, n) == 0;
}

#endif
