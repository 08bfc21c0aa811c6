/* One pass over a Kineto trace's bytes into event columns (pure C, no Python), fed in pieces.
 *
 * Complete ('X') events whose every field profkit reads has the plain form (numbers, strings
 * or null where the typed decoder expects them, no duplicate keys) are "fast": their values
 * go into the columns below; so do the allocator's plain samples, into their own (M_*).
 * Events of the phases profkit skips (flows, and the rest of traceevents.OTHER_PHASES) are
 * counted and dropped. Every other element of traceEvents (metadata, counters, instants, and
 * any event with a field of an unusual form) is "other": its bytes are copied into `kept`
 * and the Python reader decodes them exactly as before.
 *
 * The document is fed in pieces (scan_feed): each call reads the whole elements (and
 * top-level members) its window holds and says how many bytes it used; the caller keeps the
 * rest, appends the next piece and feeds again. Nothing points into a window once a call
 * returns (strings are copied into their intern tables, other events into `kept`, the
 * document around the events into `head`), so the caller can drop the bytes it fed. */
#ifndef PROFKIT_SCAN_H
#define PROFKIT_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

enum { /* the fast events' columns, one row per fast event, in file order */
    C_INDEX,      /* int64: the event's place in traceEvents */
    C_TS,         /* float64 (NaN: absent or null) */
    C_DUR,        /* float64 */
    C_NAME,       /* int32: id in `strings` (-1: absent or null) */
    C_CAT,        /* int32 */
    C_PID,        /* int64 (when C_PID_S is -1) */
    C_TID,        /* int64 */
    C_PID_S,      /* int32: id in `strings` of a text pid, else -1 */
    C_TID_S,      /* int32 */
    C_ARG0,       /* float64 x SCAN_NARGS: the numeric args of event.c's ARG_KEYS */
    C_RAW0 = C_ARG0 + 8, /* int32 x SCAN_NRAW: id in `raw` of the raw-JSON ARG_KEYS (-1: none) */
    C_COLL = C_RAW0 + 4, /* uint8: a non-null "Collective name" or "In msg nelems" */
    C_SEQ,        /* int64: the "Sequence number" arg (SCAN_NO_SEQ: absent or null) */
    SCAN_NCOLS
};
#define SCAN_NARGS 8
#define SCAN_NRAW 4
#define SCAN_NO_SEQ INT64_MIN

/* The allocator's samples: instants named "[memory]" or "[OutOfMemory]" whose ts is a number,
 * tid an int or text, and args Bytes, Total Allocated, Total Reserved, Device Id and Device
 * Type (and Addr, if any) plain integers, one row each, in file order (any other instant is
 * "other"; profkit.trace.memorysamples checks the ranges, as for the decoded ones). */
enum {
    M_INDEX,    /* int64: the event's place in traceEvents */
    M_TS,       /* float64 */
    M_TID,      /* int64 (when M_TID_S is -1) */
    M_TID_S,    /* int32: id in `strings` of a text tid, else -1 */
    M_OOM,      /* uint8: named "[OutOfMemory]" */
    M_BYTES,    /* int64 x SCAN_NMEMARGS: Bytes, Total Allocated, Total Reserved, Device Id, */
    M_ADDR = M_BYTES + 5, /* Device Type; then Addr (-1: absent) */
    SCAN_NMEM
};
#define SCAN_NMEMARGS 6

enum { O_INDEX, O_START, O_END, SCAN_NOTHER }; /* int64 each: the other events, spans in kept */
enum { K_START, K_END, SCAN_NCOLL }; /* int64 each: the bytes in kept of each C_COLL row */

typedef int (*ScanToDouble)(const unsigned char *s, size_t n, double *out); /* 1: finite */

/* What a scan keeps of each element of traceEvents: the columns of the fast events and the
 * bytes of the others (profkit's reader), every element's bytes (merge's split of the events,
 * drained feed by feed), or nothing (a check that the file is one the scanner reads). */
enum { SCAN_COLUMNS, SCAN_SPLIT, SCAN_CHECK };

typedef struct {
    int mode;       /* SCAN_COLUMNS, SCAN_SPLIT or SCAN_CHECK */
    Grow col[SCAN_NCOLS];
    Grow mem[SCAN_NMEM];
    Grow other[SCAN_NOTHER];
    Grow coll[SCAN_NCOLL];
    Grow kept;      /* the other events' bytes, and those of the fast events with C_COLL */
    Grow head;      /* the document with its traceEvents emptied ("[]"); empty: the root is it */
    Intern strings; /* names, categories and text ids (raw bytes, escapes undecoded) */
    Intern raw;     /* raw JSON of the Input Dims, Input type, Input Strides, Concrete Inputs */
    int64_t count;  /* elements of traceEvents */
    int root_array; /* the root is the events array */
    int events_seen; /* the root object's traceEvents key was read */
    int state;      /* where the next byte fed is (scan.c's ST_*) */
    int depth;      /* containers open there */
    ScanToDouble to_double;
} Scan;

enum { SCAN_DECLINED = 0, SCAN_OK = 1, SCAN_NO_MEMORY = -1 };

void scan_init(Scan *s, ScanToDouble to_double); /* mode SCAN_COLUMNS; set s->mode after */
void scan_free(Scan *s);
/* Read what buf[0:n] holds whole; *used: the bytes read (the caller feeds the rest again,
 * with more after it). final: buf ends the document (SCAN_OK then means it was read whole).
 * SCAN_DECLINED: the document is left to the Python reader (not strict JSON or not valid
 * UTF-8, nesting deeper than JS_MAX_DEPTH, surrogate escapes, no traceEvents list). */
int scan_feed(Scan *s, const unsigned char *buf, size_t n, int final, size_t *used);
int scan_buffer(Scan *s, const unsigned char *buf, size_t n); /* the whole document at once */
int scan_done(const Scan *s); /* a final feed read the whole document */

#endif
