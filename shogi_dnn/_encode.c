/* shogi_dnn._encode: compiled kernels of features.py (see shogi_dnn/fast_encoding.py for the contract).
 *
 * replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes) -> int
 * pack_rows(board, hands, pieces, promoted) -> int
 *
 * Arguments are C-contiguous buffers (numpy arrays): uint8 boards [.., 81] and hands [.., 14] in the
 * package's codes, int64 absolute move codes, uint16 move codes, uint8 pieces [.., 40] / promoted [.., 5].
 * Both return -1, or the index of the first move / row that cannot be handled (the caller raises).
 * Built at install time as an optional extension: without a C compiler, features.py's numpy path is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NUM_SQUARES 81
#define NUM_TYPES 14
#define HAND_KINDS 7
#define SLOTS 40
#define PROMOTED_BYTES 5
#define SLOT_IN_HAND 81
#define SLOT_OPPONENT 0x80
#define SLOT_ABSENT 0x7F
#define MOVE_NONE 0xFFFF

static const uint8_t PROMOTES_TO[15] = {0, 9, 10, 11, 12, 0, 13, 14, 0, 0, 0, 0, 0, 0, 0};
static const uint8_t UNPROMOTED[15] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 6, 7};
static const int KIND_FIRST_SLOT[9] = {0, 0, 18, 22, 26, 30, 34, 36, 38};
static const int KIND_SLOTS[9] = {0, 18, 4, 4, 4, 4, 2, 2, 2};

static int check_size(Py_buffer *buffer, Py_ssize_t bytes, const char *name) {
    if (buffer->len != bytes) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", name, buffer->len, bytes);
        return 0;
    }
    return 1;
}

static long replay(const uint8_t *start_board, const uint8_t *start_hands, int turn, const int64_t *moves,
                   Py_ssize_t count, uint8_t *board, uint8_t *hands, uint16_t *move_codes) {
    uint8_t squares[NUM_SQUARES], held[2 * HAND_KINDS];
    memcpy(squares, start_board, NUM_SQUARES);
    memcpy(held, start_hands, 2 * HAND_KINDS);
    for (Py_ssize_t ply = 0; ply <= count; ply++) {
        uint8_t *row = board + ply * NUM_SQUARES, *hand = hands + ply * 2 * HAND_KINDS;
        if (turn == 0) {
            memcpy(row, squares, NUM_SQUARES);
            memcpy(hand, held, 2 * HAND_KINDS);
        } else {
            for (int s = 0; s < NUM_SQUARES; s++) {
                uint8_t code = squares[NUM_SQUARES - 1 - s];
                row[s] = code == 0 ? 0 : (code <= NUM_TYPES ? code + NUM_TYPES : code - NUM_TYPES);
            }
            memcpy(hand, held + HAND_KINDS, HAND_KINDS);
            memcpy(hand + HAND_KINDS, held, HAND_KINDS);
        }
        if (ply == count) {
            move_codes[ply] = MOVE_NONE;
            break;
        }
        int64_t code = moves[ply];
        if (code < 0 || code >= (int64_t)(NUM_SQUARES + HAND_KINDS) * NUM_SQUARES * 2)
            return (long)ply;
        int promote = (int)(code & 1);
        int origin = (int)((code >> 1) / NUM_SQUARES), destination = (int)((code >> 1) % NUM_SQUARES);
        if (turn == 0) {
            move_codes[ply] = (uint16_t)code;
        } else {
            int view_origin = origin >= NUM_SQUARES ? origin : NUM_SQUARES - 1 - origin;
            move_codes[ply] = (uint16_t)(((view_origin * NUM_SQUARES) + NUM_SQUARES - 1 - destination) * 2 + promote);
        }
        int offset = NUM_TYPES * turn;
        uint8_t target = squares[destination];
        if (origin >= NUM_SQUARES) {                              /* a drop */
            int kind = origin - NUM_SQUARES;
            if (promote || target != 0 || held[HAND_KINDS * turn + kind] == 0)
                return (long)ply;
            held[HAND_KINDS * turn + kind]--;
            squares[destination] = (uint8_t)(kind + 1 + offset);
        } else {
            uint8_t piece = squares[origin];
            if (piece == 0 || (piece > NUM_TYPES) != (turn == 1))
                return (long)ply;
            if (target != 0) {
                if ((target > NUM_TYPES) == (turn == 1))
                    return (long)ply;                              /* onto its own piece */
                uint8_t captured = UNPROMOTED[target > NUM_TYPES ? target - NUM_TYPES : target];
                if (captured == 8)
                    return (long)ply;                              /* a king is never captured */
                held[HAND_KINDS * turn + captured - 1]++;
            }
            int piece_type = piece - offset;
            if (promote) {
                piece_type = PROMOTES_TO[piece_type];
                if (piece_type == 0)
                    return (long)ply;
            }
            squares[origin] = 0;
            squares[destination] = (uint8_t)(piece_type + offset);
        }
        turn = 1 - turn;
    }
    return -1;
}

static PyObject *replay_game(PyObject *self, PyObject *args) {
    Py_buffer start_board, start_hands, moves, board, hands, move_codes;
    int first_turn;
    if (!PyArg_ParseTuple(args, "y*y*iy*w*w*w*", &start_board, &start_hands, &first_turn, &moves, &board,
                          &hands, &move_codes))
        return NULL;
    long result = -2;
    Py_ssize_t count = moves.len / (Py_ssize_t)sizeof(int64_t);
    if (check_size(&start_board, NUM_SQUARES, "start_board") && check_size(&start_hands, 2 * HAND_KINDS, "start_hands")
        && check_size(&moves, count * (Py_ssize_t)sizeof(int64_t), "moves")
        && check_size(&board, (count + 1) * NUM_SQUARES, "board")
        && check_size(&hands, (count + 1) * 2 * HAND_KINDS, "hands")
        && check_size(&move_codes, (count + 1) * (Py_ssize_t)sizeof(uint16_t), "move_codes")) {
        if (first_turn != 0 && first_turn != 1) {
            PyErr_SetString(PyExc_ValueError, "first_turn must be 0 or 1");
        } else {
            Py_BEGIN_ALLOW_THREADS
            result = replay(start_board.buf, start_hands.buf, first_turn, moves.buf, count, board.buf, hands.buf,
                            move_codes.buf);
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&start_board);
    PyBuffer_Release(&start_hands);
    PyBuffer_Release(&moves);
    PyBuffer_Release(&board);
    PyBuffer_Release(&hands);
    PyBuffer_Release(&move_codes);
    if (result == -2)
        return NULL;
    return PyLong_FromLong(result);
}

static Py_ssize_t pack(const uint8_t *board, const uint8_t *hands, uint8_t *pieces, uint8_t *promoted, Py_ssize_t n) {
    for (Py_ssize_t r = 0; r < n; r++) {
        const uint8_t *row = board + r * NUM_SQUARES, *hand = hands + r * 2 * HAND_KINDS;
        uint8_t *out = pieces + r * SLOTS, *flags = promoted + r * PROMOTED_BYTES;
        int placed[9] = {0};
        memset(flags, 0, PROMOTED_BYTES);
        for (int s = 0; s < NUM_SQUARES; s++) {
            uint8_t code = row[s];
            if (code == 0)
                continue;
            if (code > 2 * NUM_TYPES)
                return r;
            int opponent = code > NUM_TYPES;
            int piece_type = opponent ? code - NUM_TYPES : code;
            int kind = UNPROMOTED[piece_type];
            if (placed[kind] == KIND_SLOTS[kind])
                return r;
            int slot = KIND_FIRST_SLOT[kind] + placed[kind]++;
            out[slot] = (uint8_t)(s | (opponent ? SLOT_OPPONENT : 0));
            if (piece_type > 8)
                flags[slot >> 3] |= (uint8_t)(1u << (slot & 7));
        }
        for (int kind = 1; kind <= 8; kind++) {
            int slot = KIND_FIRST_SLOT[kind] + placed[kind], end = KIND_FIRST_SLOT[kind] + KIND_SLOTS[kind];
            if (kind <= HAND_KINDS) {
                int own = hand[kind - 1], other = hand[HAND_KINDS + kind - 1];
                if (placed[kind] + own + other > KIND_SLOTS[kind])
                    return r;
                for (int i = 0; i < own; i++)
                    out[slot++] = SLOT_IN_HAND;
                for (int i = 0; i < other; i++)
                    out[slot++] = SLOT_IN_HAND | SLOT_OPPONENT;
            }
            while (slot < end)
                out[slot++] = SLOT_ABSENT;
        }
    }
    return -1;
}

static PyObject *pack_rows(PyObject *self, PyObject *args) {
    Py_buffer board, hands, pieces, promoted;
    if (!PyArg_ParseTuple(args, "y*y*w*w*", &board, &hands, &pieces, &promoted))
        return NULL;
    Py_ssize_t n = board.len / NUM_SQUARES, result = -2;
    if (check_size(&board, n * NUM_SQUARES, "board") && check_size(&hands, n * 2 * HAND_KINDS, "hands")
        && check_size(&pieces, n * SLOTS, "pieces") && check_size(&promoted, n * PROMOTED_BYTES, "promoted")) {
        Py_BEGIN_ALLOW_THREADS
        result = pack(board.buf, hands.buf, pieces.buf, promoted.buf, n);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&board);
    PyBuffer_Release(&hands);
    PyBuffer_Release(&pieces);
    PyBuffer_Release(&promoted);
    if (result == -2)
        return NULL;
    return PyLong_FromSsize_t(result);
}

static PyMethodDef methods[] = {
    {"replay_game", replay_game, METH_VARARGS,
     "replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes) -> -1 or a ply"},
    {"pack_rows", pack_rows, METH_VARARGS, "pack_rows(board, hands, pieces, promoted) -> -1 or a row"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode", "Compiled kernels of shogi_dnn.features.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__encode(void) { return PyModule_Create(&module); }
