/* profkit._kineto: the CPython binding of the native Kineto trace scanner (scan.c).
 *
 * scanner(mode=0) -> a scan in progress (a capsule); mode (scan.h): 0 columns, 1 split
 * (every element's bytes, taken feed by feed with drain), 2 check (nothing kept);
 * drain(scanner) -> (bytes, starts, ends): the elements a split scan read since the last
 * drain, and their spans in those bytes;
 * feed(scanner, buffer, final) -> int | None: the bytes of buffer read (feed the rest again
 * with more after it), None when the scanner declines the file (the Python reader then
 * reads it as it always did); the scan runs without the GIL, so that other threads run
 * meanwhile (one feed at a time per scanner: another call on it meanwhile is refused);
 * result(scanner) -> dict: the columns of the trace's fast events and of its allocator
 * samples, as Column objects that own the scan's buffers (handed over, not copied; read by
 * numpy.frombuffer on the Python side), the distinct strings and Input Dims they point to,
 * the bytes of the events left to the Python reader (kept) with their spans, and the
 * document around the events (head); the scanner's buffers are released;
 * scan(buffer) -> dict | None: the same of a whole document at once (without the GIL);
 * join(buffer, starts, ends) -> bytes: the spans as one JSON array, "[a,b,...]". */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "jscan.h"
#include "scan.h"

static const char *const COLUMN_NAMES[SCAN_NCOLS] = {
    "index", "ts", "dur", "name", "cat", "pid", "tid", "pid_text", "tid_text",
    "arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7",
    "raw0", "raw1", "raw2", "raw3", "coll", "seq"};
static const char *const MEM_NAMES[SCAN_NMEM] = {
    "index", "ts", "tid", "tid_text", "oom", "bytes", "allocated", "reserved", "device",
    "device_type", "addr"};
static const char *const OTHER_NAMES[SCAN_NOTHER] = {"index", "start", "end"};
static const char *const COLL_NAMES[SCAN_NCOLL] = {"start", "end"};
static const char *const CAPSULE = "profkit._kineto.scanner";

#define NUMBER_CHARS 64 /* a longer number is left to the Python reader */

/* s[0:n] as a C string in text[NUMBER_CHARS]; 0 when empty or too long. */
static int number_text(const unsigned char *s, size_t n, char *text) {
    if (n == 0 || n >= NUMBER_CHARS) return 0;
    memcpy(text, s, n);
    text[n] = 0;
    return 1;
}

static int to_double(const unsigned char *s, size_t n, double *out) {
    char text[NUMBER_CHARS];
    if (!number_text(s, n, text)) return 0;
    char *end = NULL;
    double v = PyOS_string_to_double(text, &end, NULL); /* locale-independent, correctly rounded */
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (end != text + n) return 0;
    *out = v;
    return 1;
}

/* The numbers js_fast_double leaves (more than 53 bits of digits), parsed in a scan that
 * runs without the GIL. Where the C library has strtod_l (glibc, macOS: correctly rounded,
 * as Python's parser is), with the "C" locale's decimal point; elsewhere Python's parser,
 * the GIL taken for each such number. */
#if defined(__GLIBC__) || defined(__APPLE__)
#include <locale.h>
#ifdef __APPLE__
#include <xlocale.h>
#endif
static locale_t C_NUMERIC; /* made once, at import */

static int to_double_c(const unsigned char *s, size_t n, double *out) {
    char text[NUMBER_CHARS];
    if (!number_text(s, n, text)) return 0;
    char *end = NULL;
    *out = strtod_l(text, &end, C_NUMERIC); /* out of range: +-inf or 0, as Python's */
    return end == text + n;
}
#endif

static int to_double_gil(const unsigned char *s, size_t n, double *out) {
    PyGILState_STATE gil = PyGILState_Ensure();
    int ok = to_double(s, n, out);
    PyGILState_Release(gil);
    return ok;
}

static ScanToDouble to_double_nogil = to_double_gil;

/* A column's bytes handed over from the scan, not copied: an object that owns a growable
 * buffer's memory (freed with it) and lends it, writable, through the buffer protocol
 * (numpy.frombuffer keeps the object alive while an array views it). */
typedef struct {
    PyObject_HEAD
    char *data; /* NULL when empty */
    Py_ssize_t len;
} Owned;

static char NOTHING[1];

static int owned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Owned *o = (Owned *)self;
    return PyBuffer_FillInfo(view, self, o->data ? o->data : NOTHING, o->len, 0, flags);
}

static void owned_dealloc(PyObject *self) {
    free(((Owned *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs OWNED_BUFFER = {owned_getbuffer, NULL};

static PyTypeObject OWNED_TYPE = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profkit._kineto.Column",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = owned_dealloc,
    .tp_as_buffer = &OWNED_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The bytes of one column of a scan (read them with numpy.frombuffer).",
};

/* The bytes of g as an Owned (g emptied: its memory is the object's now, cut to its length). */
static PyObject *owned_from(Grow *g) {
    Owned *o = PyObject_New(Owned, &OWNED_TYPE);
    if (!o) return NULL;
    o->data = NULL;
    o->len = (Py_ssize_t)g->len;
    if (g->len) {
        char *cut = realloc(g->data, g->len); /* unused capacity back (a large one: no copy) */
        o->data = cut ? cut : g->data;
        g->data = NULL;
    }
    grow_free(g);
    return (PyObject *)o;
}

/* A dict {name: column} of n growable buffers, each handed over, not copied (so that the
 * columns are never held twice, nor their pages touched again). */
static PyObject *grow_dict(Grow *g, const char *const *names, int n) {
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < n; i++) {
        PyObject *arr = owned_from(&g[i]);
        if (!arr || PyDict_SetItemString(out, names[i], arr) < 0) {
            Py_XDECREF(arr);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(arr);
    }
    return out;
}

/* The interned strings, unescaped, as str; NULL with an exception when one is not UTF-8. */
static PyObject *string_list(const Intern *t) {
    PyObject *out = PyList_New((Py_ssize_t)t->count);
    char *tmp = NULL;
    size_t tmp_cap = 0;
    for (size_t i = 0; out && i < t->count; i++) {
        const Key *k = &t->keys[i];
        const unsigned char *bytes = intern_bytes(t, i);
        JsString str = {bytes, k->n, memchr(bytes, '\\', k->n) != NULL};
        PyObject *item;
        if (!str.escaped) {
            item = PyUnicode_DecodeUTF8((const char *)bytes, (Py_ssize_t)k->n, "strict");
        } else {
            if (tmp_cap < k->n + 1) { /* unescaping never lengthens a string */
                char *bigger = realloc(tmp, k->n + 1);
                if (!bigger) {
                    PyErr_NoMemory();
                    Py_CLEAR(out);
                    break;
                }
                tmp = bigger;
                tmp_cap = k->n + 1;
            }
            size_t len;
            if (!js_unescape(&str, tmp, tmp_cap, &len)) {
                PyErr_SetString(PyExc_ValueError, "bad escape");
                item = NULL;
            } else {
                item = PyUnicode_DecodeUTF8(tmp, (Py_ssize_t)len, "strict");
            }
        }
        if (!item) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
    free(tmp);
    return out;
}

static PyObject *bytes_list(const Intern *t) {
    PyObject *out = PyList_New((Py_ssize_t)t->count);
    for (size_t i = 0; out && i < t->count; i++) {
        PyObject *item = PyBytes_FromStringAndSize((const char *)intern_bytes(t, i),
                                                   (Py_ssize_t)t->keys[i].n);
        if (!item) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
    return out;
}

static PyObject *result_dict(Scan *s) {
    PyObject *columns = grow_dict(s->col, COLUMN_NAMES, SCAN_NCOLS);
    PyObject *memory = columns ? grow_dict(s->mem, MEM_NAMES, SCAN_NMEM) : NULL;
    PyObject *other = memory ? grow_dict(s->other, OTHER_NAMES, SCAN_NOTHER) : NULL;
    PyObject *coll = other ? grow_dict(s->coll, COLL_NAMES, SCAN_NCOLL) : NULL;
    PyObject *strings = coll ? string_list(&s->strings) : NULL;
    PyObject *dims = strings ? bytes_list(&s->raw) : NULL;
    intern_free(&s->strings);
    intern_free(&s->raw);
    PyObject *head = dims ? PyBytes_FromStringAndSize(s->head.data ? s->head.data : "",
                                                      (Py_ssize_t)s->head.len) : NULL;
    grow_free(&s->head);
    PyObject *kept = head ? PyByteArray_FromStringAndSize(s->kept.data ? s->kept.data : "",
                                                          (Py_ssize_t)s->kept.len) : NULL;
    grow_free(&s->kept);
    PyObject *out = NULL;
    if (kept)
        out = Py_BuildValue("{s:L,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:O}", "count",
                            (long long)s->count, "root_array",
                            s->root_array ? Py_True : Py_False, "columns", columns,
                            "memory", memory, "other", other, "coll", coll, "strings", strings,
                            "raw", dims, "head", head, "kept", kept);
    Py_XDECREF(columns);
    Py_XDECREF(memory);
    Py_XDECREF(other);
    Py_XDECREF(coll);
    Py_XDECREF(strings);
    Py_XDECREF(dims);
    Py_XDECREF(head);
    Py_XDECREF(kept);
    return out;
}

typedef struct {
    Scan s;
    int declined; /* a feed declined the file: nothing more is read */
    int busy;     /* a feed runs (without the GIL): another call on it is refused */
} Scanner;

/* The scanner of a capsule, unless a feed of it runs in another thread (ValueError). */
static Scanner *idle_scanner(PyObject *capsule) {
    Scanner *sc = PyCapsule_GetPointer(capsule, CAPSULE);
    if (sc && sc->busy) {
        PyErr_SetString(PyExc_ValueError, "the scanner is being fed in another thread");
        return NULL;
    }
    return sc;
}

static void scanner_free(PyObject *capsule) {
    Scanner *sc = PyCapsule_GetPointer(capsule, CAPSULE);
    if (!sc) return;
    scan_free(&sc->s);
    free(sc);
}

static PyObject *kineto_scanner(PyObject *self, PyObject *args) {
    (void)self;
    int mode = SCAN_COLUMNS;
    if (!PyArg_ParseTuple(args, "|i", &mode)) return NULL;
    if (mode != SCAN_COLUMNS && mode != SCAN_SPLIT && mode != SCAN_CHECK) {
        PyErr_SetString(PyExc_ValueError, "no such scan mode");
        return NULL;
    }
    Scanner *sc = calloc(1, sizeof *sc);
    if (!sc) return PyErr_NoMemory();
    scan_init(&sc->s, to_double_nogil); /* its feeds run without the GIL */
    sc->s.mode = mode;
    PyObject *out = PyCapsule_New(sc, CAPSULE, scanner_free);
    if (!out) {
        scan_free(&sc->s);
        free(sc);
    }
    return out;
}

static PyObject *kineto_feed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule;
    Py_buffer view;
    int final;
    if (!PyArg_ParseTuple(args, "Oy*p", &capsule, &view, &final)) return NULL;
    Scanner *sc = idle_scanner(capsule);
    PyObject *out = NULL;
    if (sc) {
        size_t used = 0;
        int rc = SCAN_DECLINED;
        if (!sc->declined) { /* the scan touches only its own buffers and the view (held) */
            sc->busy = 1;
            Py_BEGIN_ALLOW_THREADS
            rc = scan_feed(&sc->s, (const unsigned char *)view.buf, (size_t)view.len, final, &used);
            Py_END_ALLOW_THREADS
            sc->busy = 0;
        }
        if (rc == SCAN_NO_MEMORY) {
            PyErr_NoMemory();
        } else if (rc == SCAN_DECLINED) {
            sc->declined = 1;
            scan_free(&sc->s); /* its memory back at once */
            out = Py_NewRef(Py_None);
        } else {
            out = PyLong_FromSize_t(used);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* The bytes of the elements read since the last drain, with their spans in them, as
 * (bytes, starts, ends) (int64 each); the scanner keeps nothing of them (SCAN_SPLIT). */
static PyObject *kineto_drain(PyObject *self, PyObject *capsule) {
    (void)self;
    Scanner *sc = idle_scanner(capsule);
    if (!sc) return NULL;
    Scan *s = &sc->s;
    PyObject *out = Py_BuildValue("(y#y#y#)", s->kept.data ? s->kept.data : "",
                                  (Py_ssize_t)s->kept.len,
                                  s->other[O_START].data ? s->other[O_START].data : "",
                                  (Py_ssize_t)s->other[O_START].len,
                                  s->other[O_END].data ? s->other[O_END].data : "",
                                  (Py_ssize_t)s->other[O_END].len);
    s->kept.len = 0; /* the capacities stay: the next window fills them again */
    for (int i = 0; i < SCAN_NOTHER; i++) s->other[i].len = 0;
    return out;
}

/* The result of a scan fed whole (its last feed final); None when it declined, or when a
 * string is no UTF-8. */
static PyObject *scan_result(Scan *s) {
    PyObject *out = result_dict(s);
    if (!out && PyErr_ExceptionMatches(PyExc_ValueError)) { /* a string that is no UTF-8 */
        PyErr_Clear();
        out = Py_NewRef(Py_None);
    }
    scan_free(s);
    return out;
}

static PyObject *kineto_result(PyObject *self, PyObject *capsule) {
    (void)self;
    Scanner *sc = idle_scanner(capsule);
    if (!sc) return NULL;
    if (sc->declined || !scan_done(&sc->s)) {
        PyErr_SetString(PyExc_ValueError, "the scan is not complete");
        return NULL;
    }
    sc->declined = 1; /* its buffers are handed over: nothing more to feed */
    return scan_result(&sc->s);
}

static PyObject *kineto_scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Scan s;
    scan_init(&s, to_double_nogil);
    int rc;
    Py_BEGIN_ALLOW_THREADS /* the buffer is held by the view: other threads run meanwhile */
    rc = scan_buffer(&s, (const unsigned char *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc == SCAN_NO_MEMORY) {
        scan_free(&s);
        return PyErr_NoMemory();
    }
    if (rc == SCAN_DECLINED) {
        scan_free(&s);
        Py_RETURN_NONE;
    }
    return scan_result(&s);
}

static PyObject *kineto_join(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, starts, ends;
    if (!PyArg_ParseTuple(args, "y*y*y*", &buf, &starts, &ends)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = starts.len / 8, total = 2;
    if (starts.len != ends.len || starts.len % 8) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t st, en; /* memcpy: the buffers need not be aligned */
        memcpy(&st, (const char *)starts.buf + 8 * i, 8);
        memcpy(&en, (const char *)ends.buf + 8 * i, 8);
        if (st < 0 || st > en || en > buf.len || en - st > PY_SSIZE_T_MAX - 1 - total) {
            PyErr_SetString(PyExc_ValueError, "span outside the buffer");
            goto done;
        }
        total += (Py_ssize_t)(en - st) + 1;
    }
    out = PyBytes_FromStringAndSize(NULL, total - (n > 0));
    if (!out) goto done;
    char *w = PyBytes_AS_STRING(out);
    *w++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t st, en;
        memcpy(&st, (const char *)starts.buf + 8 * i, 8);
        memcpy(&en, (const char *)ends.buf + 8 * i, 8);
        if (i) *w++ = ',';
        memcpy(w, (const char *)buf.buf + st, (size_t)(en - st));
        w += en - st;
    }
    *w = ']';
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    return out;
}

static PyMethodDef METHODS[] = {
    {"scanner", kineto_scanner, METH_VARARGS, "A scan of a Kineto trace fed in pieces (mode)."},
    {"drain", kineto_drain, METH_O, "The elements a split scan read since the last drain."},
    {"feed", kineto_feed, METH_VARARGS, "Feed bytes to a scanner: the bytes read (None: declined)."},
    {"result", kineto_result, METH_O, "The columns of a scanner fed the whole document."},
    {"scan", kineto_scan, METH_O, "Scan Kineto trace JSON bytes into event columns (None: declined)."},
    {"join", kineto_join, METH_VARARGS, "Spans of a buffer as one JSON array."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_kineto", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto(void) {
    if (PyType_Ready(&OWNED_TYPE) < 0) return NULL;
#if defined(__GLIBC__) || defined(__APPLE__)
    if (!C_NUMERIC) C_NUMERIC = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (C_NUMERIC) to_double_nogil = to_double_c;
#endif
    return PyModule_Create(&MODULE);
}
