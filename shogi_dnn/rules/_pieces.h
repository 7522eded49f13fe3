/* The package's piece numbers and board shared by its C extensions (rules/_native.c, dataset/_encode.c):
 * rules/pieces.py and rules/position.py define them. */
#ifndef SHOGI_DNN_PIECES_H
#define SHOGI_DNN_PIECES_H

#include <Python.h>
#include <stdint.h>

#define NUM_SQUARES 81
#define NUM_TYPES 14
#define HAND_KINDS 7

/* By piece type 0..14: the type it promotes to (0: none), and its unpromoted type. */
static const uint8_t PROMOTES_TO[15] = {0, 9, 10, 11, 12, 0, 13, 14, 0, 0, 0, 0, 0, 0, 0};
static const uint8_t UNPROMOTED[15] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 6, 7};

static inline int check_size(Py_buffer *buffer, Py_ssize_t bytes, const char *name) {
    if (buffer->len != bytes) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", name, buffer->len, bytes);
        return 0;
    }
    return 1;
}

#endif
