/* profkit._kineto: the CPython binding of the native Kineto trace scanner (scan.c).
 *
 * scan(buffer) -> dict | None: the columns of the trace's fast events as bytearrays (read by
 * numpy.frombuffer on the Python side), the distinct strings and Input Dims they point to,
 * and the spans of the events left to the Python reader; None when the scanner declines the
 * file (the Python reader then reads it as it always did).
 * join(buffer, starts, ends) -> bytes: the spans as one JSON array, "[a,b,...]". */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "jscan.h"
#include "scan.h"

static const char *const COLUMN_NAMES[SCAN_NCOLS] = {
    "index", "start", "end", "ts", "dur", "name", "cat", "pid", "tid", "pid_text", "tid_text",
    "arg0", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7",
    "raw0", "raw1", "raw2", "raw3", "coll"};
static const char *const OTHER_NAMES[SCAN_NOTHER] = {"index", "start", "end"};

static int to_double(const unsigned char *s, size_t n, double *out) {
    char text[64];
    if (n == 0 || n >= sizeof text) return 0;
    memcpy(text, s, n);
    text[n] = 0;
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

/* A dict {name: bytearray} of n growable buffers, each freed once copied (so that the
 * columns are not held twice at once). */
static PyObject *grow_dict(Grow *g, const char *const *names, int n) {
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < n; i++) {
        PyObject *arr = PyByteArray_FromStringAndSize(g[i].data ? g[i].data : "", (Py_ssize_t)g[i].len);
        free(g[i].data);
        g[i].data = NULL;
        g[i].len = g[i].cap = 0;
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
        JsString str = {k->s, k->n, memchr(k->s, '\\', k->n) != NULL};
        PyObject *item;
        if (!str.escaped) {
            item = PyUnicode_DecodeUTF8((const char *)k->s, (Py_ssize_t)k->n, "strict");
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
        PyObject *item = PyBytes_FromStringAndSize((const char *)t->keys[i].s, (Py_ssize_t)t->keys[i].n);
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
    PyObject *other = columns ? grow_dict(s->other, OTHER_NAMES, SCAN_NOTHER) : NULL;
    PyObject *strings = other ? string_list(&s->strings) : NULL;
    PyObject *dims = strings ? bytes_list(&s->raw) : NULL;
    PyObject *out = NULL;
    if (dims)
        out = Py_BuildValue("{s:L,s:(LL),s:O,s:O,s:O,s:O}", "count", (long long)s->count,
                            "events_span", (long long)s->events_start, (long long)s->events_end,
                            "columns", columns, "other", other, "strings", strings, "raw", dims);
    Py_XDECREF(columns);
    Py_XDECREF(other);
    Py_XDECREF(strings);
    Py_XDECREF(dims);
    return out;
}

static PyObject *kineto_scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Scan s;
    scan_init(&s, to_double);
    int rc = scan_buffer(&s, (const unsigned char *)view.buf, (size_t)view.len);
    PyObject *out = NULL;
    if (rc == SCAN_NO_MEMORY) {
        PyErr_NoMemory();
    } else if (rc == SCAN_DECLINED) {
        out = Py_NewRef(Py_None);
    } else {
        out = result_dict(&s);
        if (!out && PyErr_ExceptionMatches(PyExc_ValueError)) { /* a string that is no UTF-8 */
            PyErr_Clear();
            out = Py_NewRef(Py_None);
        }
    }
    scan_free(&s);
    PyBuffer_Release(&view);
    return out;
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
    {"scan", kineto_scan, METH_O, "Scan Kineto trace JSON bytes into event columns (None: declined)."},
    {"join", kineto_join, METH_VARARGS, "Spans of a buffer as one JSON array."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_kineto", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto(void) { return PyModule_Create(&MODULE); }
