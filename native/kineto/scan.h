/* One pass over a Kineto trace's bytes into event columns (pure C, no Python).
 *
 * Complete ('X') events whose every field profkit reads has the plain form (numbers, strings
 * or null where the typed decoder expects them, no duplicate keys) are "fast": their values
 * go into the columns below. Events of the phases profkit skips (flows, and the rest of
 * traceevents.OTHER_PHASES) are counted and dropped. Every other element of traceEvents
 * (metadata, counters, instants, and any event with a field of an unusual form) is "other":
 * its byte span is recorded and the Python reader decodes it exactly as before. */
#ifndef PROFKIT_SCAN_H
#define PROFKIT_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

enum { /* the fast events' columns, one row per fast event, in file order */
    C_INDEX,      /* int64: the event's place in traceEvents */
    C_START,      /* int64: offset of its '{' */
    C_END,        /* int64: offset one past its '}' */
    C_TS,         /* float64 (NaN: absent or null) */
    C_DUR,        /* float64 */
    C_NAME,       /* int32: id in `strings` (-1: absent or null) */
    C_CAT,        /* int32 */
    C_PID,        /* int64 (when C_PID_S is -1) */
    C_TID,        /* int64 */
    C_PID_S,      /* int32: id in `strings` of a text pid, else -1 */
    C_TID_S,      /* int32 */
    C_ARG0,       /* float64 x SCAN_NARGS: the numeric args of scan.c's ARG_KEYS */
    C_RAW0 = C_ARG0 + 8, /* int32 x SCAN_NRAW: id in `raw` of scan.c's RAW_KEYS (-1: absent) */
    C_COLL = C_RAW0 + 4, /* uint8: a non-null "Collective name" or "In msg nelems" */
    SCAN_NCOLS
};
#define SCAN_NARGS 8
#define SCAN_NRAW 4

enum { O_INDEX, O_START, O_END, SCAN_NOTHER }; /* int64 each: the other events' spans */

typedef int (*ScanToDouble)(const unsigned char *s, size_t n, double *out); /* 1: finite */

typedef struct {
    Grow col[SCAN_NCOLS];
    Grow other[SCAN_NOTHER];
    Intern strings; /* names, categories and text ids (raw bytes, escapes undecoded) */
    Intern raw;     /* raw JSON of the Input Dims, Input type, Input Strides, Concrete Inputs */
    int64_t count;  /* elements of traceEvents */
    int64_t events_start, events_end; /* the traceEvents array's span; -1: the root is it */
    ScanToDouble to_double;
} Scan;

enum { SCAN_DECLINED = 0, SCAN_OK = 1, SCAN_NO_MEMORY = -1 };

void scan_init(Scan *s, ScanToDouble to_double);
void scan_free(Scan *s);
int scan_buffer(Scan *s, const unsigned char *buf, size_t n);

#endif
