/* shogi_dnn.rules._native: compiled kernels of the rules and the CSA reader (rules/native.py,
 * dataset/fast_encoding.py load them).
 *
 * play_csa(board, hands, turn, tokens, codes) -> int (below)
 * csa_move_lines(text, offset) -> int
 * csa_eval_run(text, offset, number, moves_before, evals) -> (characters, lines, moves, move_lines)
 * in_check_rows(board) -> bytes
 *
 * Built at install time as an optional extension: without a C compiler, the readers use the rules
 * backends and their regexes (same results).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_pieces.h"

/* ---- play_csa: CSA move tokens checked legal and played (a conservative subset of the reference) ----
 *
 * The package's board: square = row * 9 + col, row 0 = rank a (White's side), col 0 = file 9; codes
 * 1..14 Black's piece of type t (1 P, 2 L, 3 N, 4 S, 5 G, 6 B, 7 R, 8 K, 9 +P, 10 +L, 11 +N, 12 +S,
 * 13 +B, 14 +R), 14 + t White's. Black moves towards row 0.
 *
 * A move is accepted only when the reference (python-shogi's rules, which cshogi's backend matches)
 * certainly accepts it; anything this code does not decide (a pawn drop that gives check, which may be
 * a pawn-drop mate; capturing a king; a side without a king) stops the run, and the caller's reference
 * path judges that move. Never more lenient than the reference: tests/rules/test_native.py compares
 * every candidate move of thousands of real positions.
 */
static const int DR[8] = {-1, -1, 0, 1, 1, 1, 0, -1};
static const int DC[8] = {0, 1, 1, 1, 0, -1, -1, -1};
/* Directions a piece steps (one square) and slides (any distance), in its owner's orientation:
 * bit d = direction d above for Black (0 forward, 2 right, 4 back, 6 left); White's are turned by 4. */
static const uint8_t STEP[15] = {0, 0x01, 0x00, 0x00, 0xAB, 0xD7, 0x00, 0x00,
                                 0xFF, 0xD7, 0xD7, 0xD7, 0xD7, 0x55, 0xAA};
static const uint8_t SLIDE[15] = {0, 0x00, 0x01, 0x00, 0x00, 0x00, 0xAA, 0x55,
                                  0x00, 0x00, 0x00, 0x00, 0x00, 0xAA, 0x55};
static const char *CSA_NAMES[15] = {"", "FU", "KY", "KE", "GI", "KI", "KA", "HI",
                                    "OU", "TO", "NY", "NK", "NG", "UM", "RY"};

static inline int colour_of(uint8_t code) { return code > NUM_TYPES; }
static inline int type_of(uint8_t code) { return code > NUM_TYPES ? code - NUM_TYPES : code; }

/* Is `square` attacked by a piece of `colour`? */
static int attacked(const uint8_t *board, int square, int colour) {
    int row = square / 9, col = square % 9;
    for (int g = 0; g < 8; g++) {
        int direction = colour == 0 ? (g + 4) & 7 : g;          /* the attacker's move, in its orientation */
        int r = row + DR[g], c = col + DC[g];
        for (int distance = 1; r >= 0 && r < 9 && c >= 0 && c < 9; distance++, r += DR[g], c += DC[g]) {
            uint8_t code = board[r * 9 + c];
            if (code == 0)
                continue;
            if (colour_of(code) == colour) {
                int t = type_of(code);
                if ((distance == 1 && ((STEP[t] | SLIDE[t]) >> direction & 1)) || (SLIDE[t] >> direction & 1))
                    return 1;
            }
            break;
        }
    }
    int r = colour == 0 ? row + 2 : row - 2;                     /* knights */
    if (r >= 0 && r < 9) {
        uint8_t knight = (uint8_t)(3 + NUM_TYPES * colour);
        if ((col > 0 && board[r * 9 + col - 1] == knight) || (col < 8 && board[r * 9 + col + 1] == knight))
            return 1;
    }
    return 0;
}

static int find_king(const uint8_t *board, int colour) {
    uint8_t king = (uint8_t)(8 + NUM_TYPES * colour);
    for (int s = 0; s < NUM_SQUARES; s++)
        if (board[s] == king)
            return s;
    return -1;
}

/* NAME_TYPE[first letter - 'A'][second letter - 'A']: the piece type a CSA name gives (0: none). */
static uint8_t NAME_TYPE[26][26];

static void init_name_types(void) {
    for (int t = 1; t <= NUM_TYPES; t++)
        NAME_TYPE[CSA_NAMES[t][0] - 'A'][CSA_NAMES[t][1] - 'A'] = (uint8_t)t;
}

static inline int name_type(const char *name) {
    unsigned a = (unsigned char)name[0] - 'A', b = (unsigned char)name[1] - 'A';
    return a < 26 && b < 26 ? NAME_TYPE[a][b] : 0;
}


/* Can a piece of type t and `colour` on `from` move to `to` (geometry and blocked slides only)? */
static int reaches(const uint8_t *board, int from, int to, int t, int colour) {
    static const int DIRECTION[9] = {7, 0, 1, 6, -1, 2, 5, 4, 3};
    int from_row = from / 9, dr = to / 9 - from_row, dc = to % 9 - from % 9;
    if (from == to)
        return 0;
    if (t == 3)                                                   /* an unpromoted knight */
        return dr == (colour == 0 ? -2 : 2) && (dc == 1 || dc == -1);
    int adr = dr < 0 ? -dr : dr, adc = dc < 0 ? -dc : dc;
    if (!(dr == 0 || dc == 0 || adr == adc))
        return 0;
    int sr = (dr > 0) - (dr < 0), sc = (dc > 0) - (dc < 0);
    int g = DIRECTION[(sr + 1) * 3 + (sc + 1)];
    int direction = colour == 0 ? g : (g + 4) & 7;
    int distance = adr > adc ? adr : adc;
    if (distance == 1)
        return (STEP[t] | SLIDE[t]) >> direction & 1;
    if (!(SLIDE[t] >> direction & 1))
        return 0;
    for (int k = 1; k < distance; k++)
        if (board[(from_row + sr * k) * 9 + from % 9 + sc * k] != 0)
            return 0;
    return 1;
}

/* After a pawn drop that checks the king of `defender` on `king`: can it escape, exactly (the king
 * stepping to a square no piece attacks once it has left its own, or another piece taking the pawn on
 * `pawn` without exposing the king)? 1 when it certainly can, which every reference also sees (they
 * may see more escapes, never fewer), so the drop is not a pawn-drop mate. */
static int can_escape(uint8_t *board, int king, int pawn, int defender) {
    uint8_t king_code = board[king];
    int row = king / 9, col = king % 9;
    board[king] = 0;
    for (int g = 0; g < 8; g++) {
        int r = row + DR[g], c = col + DC[g];
        if (r < 0 || r > 8 || c < 0 || c > 8)
            continue;
        int square = r * 9 + c;
        uint8_t there = board[square];
        if (there != 0 && colour_of(there) == defender)
            continue;
        board[square] = king_code;
        int safe = !attacked(board, square, 1 - defender);
        board[square] = there;
        if (safe) {
            board[king] = king_code;
            return 1;
        }
    }
    board[king] = king_code;
    uint8_t pawn_code = board[pawn];
    for (int s = 0; s < NUM_SQUARES; s++) {
        uint8_t code = board[s];
        if (code == 0 || colour_of(code) != defender || type_of(code) == 8
            || !reaches(board, s, pawn, type_of(code), defender))
            continue;
        board[s] = 0;
        board[pawn] = code;
        int safe = !attacked(board, king, 1 - defender);
        board[s] = code;
        board[pawn] = pawn_code;
        if (safe)
            return 1;
    }
    return 0;
}

/* Rows from the mover's last rank: 0 = the last rank. */
static inline int rows_to_go(int row, int colour) { return colour == 0 ? row : 8 - row; }

static int can_stay(int t, int row, int colour) {                /* a piece that can still move */
    int left = rows_to_go(row, colour);
    return !(((t == 1 || t == 2) && left == 0) || (t == 3 && left <= 1));
}

/* One token; 1 and the move played (board, hands, *code, kings updated) when accepted, else 0,
 * unchanged. kings[c]: the square of colour c's king (-1: none), as find_king gives it. */
static int play_token(uint8_t *board, uint8_t *held, int turn, const char *token, int64_t *code, int *kings) {
    if (token[0] != (turn ? '-' : '+'))
        return 0;
    int f1 = token[1] - '0', r1 = token[2] - '0', f2 = token[3] - '0', r2 = token[4] - '0';
    int named = name_type(token + 5);
    if (f2 < 1 || f2 > 9 || r2 < 1 || r2 > 9 || named == 0)
        return 0;
    int to = (r2 - 1) * 9 + (9 - f2), to_row = r2 - 1, offset = NUM_TYPES * turn;
    int king = kings[turn];
    if (king < 0 || kings[1 - turn] < 0)
        return 0;                                                 /* left to the reference */
    uint8_t target = board[to];
    if (f1 == 0 && r1 == 0) {                                     /* a drop */
        if (named > 7 || target != 0 || held[HAND_KINDS * turn + named - 1] == 0
            || !can_stay(named, to_row, turn))
            return 0;
        if (named == 1) {
            for (int r = 0; r < 9; r++)                           /* two pawns on a file */
                if (board[r * 9 + to % 9] == 1 + offset)
                    return 0;
        }
        board[to] = (uint8_t)(named + offset);
        if (attacked(board, king, 1 - turn)) {
            board[to] = 0;
            return 0;
        }
        int ahead = to + (turn == 0 ? -9 : 9);                    /* a pawn that gives check: mate? */
        if (named == 1 && board[ahead] == 8 + NUM_TYPES * (1 - turn)
            && !can_escape(board, ahead, to, 1 - turn)) {
            board[to] = 0;
            return 0;                                             /* pawn-drop mate? left to the reference */
        }
        held[HAND_KINDS * turn + named - 1]--;
        *code = ((int64_t)(NUM_SQUARES + named - 1) * NUM_SQUARES + to) * 2;
        return 1;
    }
    if (f1 < 1 || f1 > 9 || r1 < 1 || r1 > 9)
        return 0;
    int from = (r1 - 1) * 9 + (9 - f1), from_row = r1 - 1;
    uint8_t piece = board[from];
    if (piece == 0 || colour_of(piece) != turn || from == to)
        return 0;
    int t = type_of(piece), promote;
    if (named == t)
        promote = 0;
    else if (PROMOTES_TO[t] != 0 && named == PROMOTES_TO[t])
        promote = 1;
    else
        return 0;
    if (target != 0 && (colour_of(target) == turn || type_of(target) == 8))
        return 0;                                                 /* own piece; a king is the reference's */
    if (promote) {
        int zone_from = rows_to_go(from_row, turn) <= 2, zone_to = rows_to_go(to_row, turn) <= 2;
        if (!zone_from && !zone_to)
            return 0;
    } else if (!can_stay(t, to_row, turn)) {
        return 0;
    }
    if (!reaches(board, from, to, t, turn))
        return 0;
    board[from] = 0;
    board[to] = (uint8_t)((promote ? PROMOTES_TO[t] : t) + offset);
    if (attacked(board, t == 8 ? to : king, 1 - turn)) {
        board[from] = piece;
        board[to] = target;
        return 0;
    }
    if (target != 0)
        held[HAND_KINDS * turn + UNPROMOTED[type_of(target)] - 1]++;
    if (t == 8)
        kings[turn] = find_king(board, turn);                     /* as a fresh search (two kings...) */
    *code = ((int64_t)from * NUM_SQUARES + to) * 2 + promote;
    return 1;
}

static PyObject *play_csa(PyObject *self, PyObject *args) {
    Py_buffer board, hands, tokens, codes;
    int turn;
    if (!PyArg_ParseTuple(args, "w*w*iy*w*", &board, &hands, &turn, &tokens, &codes))
        return NULL;
    Py_ssize_t count = tokens.len / 8, played = -2;
    if (check_size(&board, NUM_SQUARES, "board") && check_size(&hands, 2 * HAND_KINDS, "hands")
        && check_size(&tokens, count * 8, "tokens")
        && check_size(&codes, count * (Py_ssize_t)sizeof(int64_t), "codes")) {
        if (turn != 0 && turn != 1) {
            PyErr_SetString(PyExc_ValueError, "turn must be 0 or 1");
        } else {
            Py_BEGIN_ALLOW_THREADS
            const char *text = tokens.buf;
            int64_t *out = codes.buf;
            int kings[2] = {find_king(board.buf, 0), find_king(board.buf, 1)};
            for (played = 0; played < count; played++) {
                if (!play_token(board.buf, hands.buf, turn, text + 8 * played, out + played, kings))
                    break;
                turn = 1 - turn;
            }
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&board);
    PyBuffer_Release(&hands);
    PyBuffer_Release(&tokens);
    PyBuffer_Release(&codes);
    if (played == -2)
        return NULL;
    return PyLong_FromSsize_t(played);
}

/* csa_move_lines(text, offset) -> the number of consecutive lines from `offset` of `text` (a str) that
 * are one well-formed CSA move each, as the regex (?:[+-][0-9]{4}[A-Z]{2}\n)+ matches them. */
static PyObject *csa_move_lines(PyObject *self, PyObject *args) {
    PyObject *text;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "Un", &text, &offset))
        return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), count = 0;
    if (offset < 0)
        offset = 0;
    for (; offset + 8 <= length; offset += 8, count++) {
        Py_UCS4 c[8];
        for (int i = 0; i < 8; i++)
            c[i] = PyUnicode_READ(kind, data, offset + i);
        if (!((c[0] == '+' || c[0] == '-') && c[1] >= '0' && c[1] <= '9' && c[2] >= '0' && c[2] <= '9'
              && c[3] >= '0' && c[3] <= '9' && c[4] >= '0' && c[4] <= '9' && c[5] >= 'A' && c[5] <= 'Z'
              && c[6] >= 'A' && c[6] <= 'Z' && c[7] == '\n'))
            break;
    }
    return PyLong_FromSsize_t(count);
}

/* csa_eval_run(text, offset, number, moves_before, evals) -> (characters, lines, moves, move_lines)
 *
 * From `offset` of `text` (a str; line `number` starts there), the longest run of lines that are each a
 * well-formed CSA move (as csa_move_lines: `+7776FU` and "\n") or an engine's evaluation comment in its
 * plain form: `'**`, ASCII spaces, an optional sign and 1 to 9 ASCII digits, then "\n" or an ASCII space
 * and anything up to "\n" (the PV). Anything else ends the run (the reader's own path reads it). Each
 * comment's score, clipped to +-32000 (evals.clip_eval), goes into the dict `evals` under the number of
 * moves before it (moves_before + the run's moves so far) unless that key is there already (setdefault,
 * what csa._read_eval does). Returns the characters and lines read, the moves' text (each move and
 * "\n") and each move's line number (None without comments: the lines from `number` on). */
static int eval_line(int kind, const void *data, Py_ssize_t at, Py_ssize_t length, Py_ssize_t *end,
                     long *score) {
    if (at + 3 > length || PyUnicode_READ(kind, data, at) != '\'' || PyUnicode_READ(kind, data, at + 1) != '*'
        || PyUnicode_READ(kind, data, at + 2) != '*')
        return 0;
    Py_ssize_t i = at + 3;
    while (i < length && PyUnicode_READ(kind, data, i) == ' ')
        i++;
    int negative = 0, digits = 0;
    long value = 0;
    if (i < length && (PyUnicode_READ(kind, data, i) == '+' || PyUnicode_READ(kind, data, i) == '-'))
        negative = PyUnicode_READ(kind, data, i++) == '-';
    while (i < length && PyUnicode_READ(kind, data, i) >= '0' && PyUnicode_READ(kind, data, i) <= '9') {
        if (++digits > 9)
            return 0;
        value = value * 10 + (long)(PyUnicode_READ(kind, data, i++) - '0');
    }
    if (digits == 0 || i >= length)
        return 0;
    Py_UCS4 after = PyUnicode_READ(kind, data, i);
    if (after == ' ') {
        while (i < length && PyUnicode_READ(kind, data, i) != '\n')
            i++;
        if (i >= length)
            return 0;
    } else if (after != '\n') {
        return 0;
    }
    if (value > 32000)
        value = 32000;
    *score = negative ? -value : value;
    *end = i + 1;                                        /* past the "\n" */
    return 1;
}

static inline int move_line(int kind, const void *data, Py_ssize_t at, Py_ssize_t length) {
    if (at + 8 > length)
        return 0;
    Py_UCS4 c[8];
    for (int i = 0; i < 8; i++)
        c[i] = PyUnicode_READ(kind, data, at + i);
    return (c[0] == '+' || c[0] == '-') && c[1] >= '0' && c[1] <= '9' && c[2] >= '0' && c[2] <= '9'
           && c[3] >= '0' && c[3] <= '9' && c[4] >= '0' && c[4] <= '9' && c[5] >= 'A' && c[5] <= 'Z'
           && c[6] >= 'A' && c[6] <= 'Z' && c[7] == '\n';
}

static PyObject *csa_eval_run(PyObject *self, PyObject *args) {
    PyObject *text, *evals;
    Py_ssize_t offset, number, before;
    if (!PyArg_ParseTuple(args, "UnnnO!", &text, &offset, &number, &before, &PyDict_Type, &evals))
        return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text), start = offset < 0 ? 0 : offset, at = start;
    Py_ssize_t lines = 0, moves = 0, comments = 0;
    for (;; lines++) {                                   /* the run's extent; the scores into `evals` */
        Py_ssize_t end;
        long score;
        if (move_line(kind, data, at, length)) {
            moves++;
            at += 8;
        } else if (eval_line(kind, data, at, length, &end, &score)) {
            PyObject *key = PyLong_FromSsize_t(before + moves), *value = PyLong_FromLong(score);
            PyObject *kept = (key && value) ? PyDict_SetDefault(evals, key, value) : NULL;
            Py_XDECREF(key);
            Py_XDECREF(value);
            if (kept == NULL)
                return NULL;
            comments++;
            at = end;
        } else {
            break;
        }
    }
    if (comments == 0)                  /* moves alone: their text as it is, consecutive line numbers */
        return Py_BuildValue("nnNO", at - start, lines, PyUnicode_Substring(text, start, at), Py_None);
    PyObject *moves_text = PyUnicode_New(8 * moves, 127), *lines_of = PyList_New(moves);
    if (moves_text == NULL || lines_of == NULL) {
        Py_XDECREF(moves_text);
        Py_XDECREF(lines_of);
        return NULL;
    }
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(moves_text);
    Py_ssize_t move = 0, line = 0;
    for (Py_ssize_t i = start; i < at; line++) {         /* again: the moves' text and line numbers */
        if (PyUnicode_READ(kind, data, i) == '\'') {
            while (PyUnicode_READ(kind, data, i) != '\n')
                i++;
            i++;
            continue;
        }
        for (int c = 0; c < 8; c++)
            out[8 * move + c] = (Py_UCS1)PyUnicode_READ(kind, data, i + c);
        PyObject *number_of = PyLong_FromSsize_t(number + line);
        if (number_of == NULL) {
            Py_DECREF(moves_text);
            Py_DECREF(lines_of);
            return NULL;
        }
        PyList_SET_ITEM(lines_of, move, number_of);
        move++;
        i += 8;
    }
    return Py_BuildValue("nnNN", at - start, lines, moves_text, lines_of);
}

/* in_check_rows(board) -> bytes: for each [81] row of `board` ([N, 81] codes, the side to move's view as
 * replay_game writes them), 1 when Black's (the side to move's) king is attacked by a White piece, else 0
 * (0 without a Black king; with two, the first in square order): rules.in_check(row, BLACK) for every
 * row, for the positions of a fourfold repetition (convert.worker._repeat_span). */
static PyObject *in_check_rows(PyObject *self, PyObject *args) {
    Py_buffer board;
    if (!PyArg_ParseTuple(args, "y*", &board))
        return NULL;
    Py_ssize_t n = board.len / NUM_SQUARES;
    PyObject *out = NULL;
    if (check_size(&board, n * NUM_SQUARES, "board")) {
        out = PyBytes_FromStringAndSize(NULL, n);
        if (out != NULL) {
            char *flags = PyBytes_AS_STRING(out);
            const uint8_t *rows = board.buf;
            for (Py_ssize_t r = 0; r < n; r++) {
                const uint8_t *row = rows + r * NUM_SQUARES;
                int king = find_king(row, 0);
                flags[r] = (char)(king >= 0 && attacked(row, king, 1));
            }
        }
    }
    PyBuffer_Release(&board);
    return out;
}

static PyMethodDef methods[] = {
    {"play_csa", play_csa, METH_VARARGS,
     "play_csa(board, hands, turn, tokens, codes) -> moves played (board and hands updated in place)"},
    {"csa_move_lines", csa_move_lines, METH_VARARGS,
     "csa_move_lines(text, offset) -> consecutive well-formed CSA move lines from offset"},
    {"csa_eval_run", csa_eval_run, METH_VARARGS,
     "csa_eval_run(text, offset, number, moves_before, evals) -> (characters, lines, moves, move_lines)"},
    {"in_check_rows", in_check_rows, METH_VARARGS,
     "in_check_rows(board) -> bytes: 1 where the side to move (Black, in the rows' view) is in check"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native",
                                    "Compiled kernels of shogi_dnn.rules and the CSA reader.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    init_name_types();
    return PyModule_Create(&module);
}
