/* shogi_dnn.dataset._encode: compiled kernels of features.py (see shogi_dnn/dataset/fast_encoding.py
 * for the contract).
 *
 * replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes[, pieces,
 *             promoted]) -> int
 * pack_rows(board, hands, pieces, promoted) -> int
 * fourfold_rows(pieces, promoted, first_turn) -> int (below)
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

#include "../rules/_pieces.h"

#define SLOTS 40
#define PROMOTED_BYTES 5
#define SLOT_IN_HAND 81
#define SLOT_OPPONENT 0x80
#define SLOT_ABSENT 0x7F
#define MOVE_NONE 0xFFFF

static const int KIND_FIRST_SLOT[9] = {0, 0, 18, 22, 26, 30, 34, 36, 38};
static const int KIND_SLOTS[9] = {0, 18, 4, 4, 4, 4, 2, 2, 2};
/* Own <-> opponent codes: 0 stays 0, 1..14 <-> 15..28 (codes past 28 are mapped to 0: never valid). */
static uint8_t SWAP_COLOURS[256];
/* By piece code: its kind 1..8 (0 for empty or an invalid code), promoted flag, opponent flag. */
static uint8_t CODE_KIND[256], CODE_PROMOTED[256], CODE_OPPONENT[256];

static void init_tables(void) {
    for (int code = 1; code <= 2 * NUM_TYPES; code++) {
        int opponent = code > NUM_TYPES, t = opponent ? code - NUM_TYPES : code;
        SWAP_COLOURS[code] = (uint8_t)(opponent ? t : t + NUM_TYPES);
        CODE_KIND[code] = UNPROMOTED[t];
        CODE_PROMOTED[code] = t > 8;
        CODE_OPPONENT[code] = opponent ? SLOT_OPPONENT : 0;
    }
}

/* Board pieces of each kind (1..8) as a list of squares (Black's view) in increasing order, kept up
 * to date move by move, so that a replayed position is packed (pack() below, same bytes) by reading
 * the lists instead of sorting the board's pieces again. */
typedef struct {
    uint8_t count[9];
    uint8_t squares[9][18];
} KindLists;

static inline void list_remove(KindLists *lists, int kind, int square) {
    uint8_t *sq = lists->squares[kind];
    int n = lists->count[kind], i = 0;
    while (i < n && sq[i] != square)
        i++;
    for (; i + 1 < n; i++)
        sq[i] = sq[i + 1];
    lists->count[kind] = (uint8_t)(n - 1);
}

static inline int list_insert(KindLists *lists, int kind, int square) {
    uint8_t *sq = lists->squares[kind];
    int n = lists->count[kind], i = n;
    if (n >= KIND_SLOTS[kind])
        return 0;
    while (i > 0 && sq[i - 1] > square) {
        sq[i] = sq[i - 1];
        i--;
    }
    sq[i] = (uint8_t)square;
    lists->count[kind] = (uint8_t)(n + 1);
    return 1;
}

/* Kind `kind`'s slots of the packed row (pieces, promoted flags) of the position `squares` / `held`
 * seen by `view` (the side to move: 0 Black's view, 1 White's rotated view), as pack() packs the rows
 * replay writes; replay keeps both views' rows up to date by refilling the kinds a move touches. */
static void fill_kind(const KindLists *lists, const uint8_t *squares, const uint8_t *held, int view, int kind,
                      uint8_t *out, uint64_t *flags) {
    int slot = KIND_FIRST_SLOT[kind], end = slot + KIND_SLOTS[kind], n = lists->count[kind];
    const uint8_t *sq = lists->squares[kind];
    uint64_t bits = 0;
    if (view == 0) {
        for (int i = 0; i < n; i++, slot++) {
            uint8_t code = squares[sq[i]];
            out[slot] = (uint8_t)(sq[i] | CODE_OPPONENT[code]);
            bits |= (uint64_t)CODE_PROMOTED[code] << slot;
        }
    } else {                                      /* rotated view: squares 80 - s, in reverse order */
        for (int i = n - 1; i >= 0; i--, slot++) {
            uint8_t code = squares[sq[i]];
            out[slot] = (uint8_t)((NUM_SQUARES - 1 - sq[i]) | (CODE_OPPONENT[code] ^ SLOT_OPPONENT));
            bits |= (uint64_t)CODE_PROMOTED[code] << slot;
        }
    }
    if (kind <= HAND_KINDS) {
        int own = held[HAND_KINDS * view + kind - 1], other = held[HAND_KINDS * (1 - view) + kind - 1];
        for (int i = 0; i < own && slot < end; i++)
            out[slot++] = SLOT_IN_HAND;
        for (int i = 0; i < other && slot < end; i++)
            out[slot++] = SLOT_IN_HAND | SLOT_OPPONENT;
    }
    while (slot < end)
        out[slot++] = SLOT_ABSENT;
    uint64_t range = (((uint64_t)1 << KIND_SLOTS[kind]) - 1) << KIND_FIRST_SLOT[kind];
    *flags = (*flags & ~range) | bits;
}

typedef struct {
    uint8_t row[2][SLOTS];                        /* [view] */
    uint64_t flags[2];
} PackedViews;

static inline void refill(PackedViews *packed, const KindLists *lists, const uint8_t *squares,
                          const uint8_t *held, int kind) {
    for (int view = 0; view < 2; view++)
        fill_kind(lists, squares, held, view, kind, packed->row[view], &packed->flags[view]);
}

/* `pieces` / `promoted` NULL: no packed rows. Returns -1, or the ply of the first move that cannot be
 * played (or, packing, the start position or a move that leaves more pieces of a kind than one set). */
static long replay(const uint8_t *start_board, const uint8_t *start_hands, int turn, const int64_t *moves,
                   Py_ssize_t count, uint8_t *board, uint8_t *hands, uint16_t *move_codes,
                   uint8_t *pieces, uint8_t *promoted) {
    uint8_t squares[NUM_SQUARES], rotated[NUM_SQUARES], held[2 * HAND_KINDS];    /* rotated: White's view */
    KindLists lists;
    PackedViews packed;
    memcpy(squares, start_board, NUM_SQUARES);
    memcpy(held, start_hands, 2 * HAND_KINDS);
    for (int s = 0; s < NUM_SQUARES; s++)
        rotated[s] = SWAP_COLOURS[squares[NUM_SQUARES - 1 - s]];
    if (pieces != NULL) {
        memset(&lists, 0, sizeof lists);
        for (int s = 0; s < NUM_SQUARES; s++) {
            if (squares[s] > 2 * NUM_TYPES)
                return 0;
            if (CODE_KIND[squares[s]] && !list_insert(&lists, CODE_KIND[squares[s]], s))
                return 0;
        }
        for (int kind = 1; kind <= HAND_KINDS; kind++)
            if (lists.count[kind] + held[kind - 1] + held[HAND_KINDS + kind - 1] > KIND_SLOTS[kind])
                return 0;
        packed.flags[0] = packed.flags[1] = 0;
        for (int kind = 1; kind <= 8; kind++)
            refill(&packed, &lists, squares, held, kind);
    }
    for (Py_ssize_t ply = 0; ply <= count; ply++) {
        uint8_t *row = board + ply * NUM_SQUARES, *hand = hands + ply * 2 * HAND_KINDS;
        if (turn == 0) {
            memcpy(row, squares, NUM_SQUARES);
            memcpy(hand, held, 2 * HAND_KINDS);
        } else {
            memcpy(row, rotated, NUM_SQUARES);
            memcpy(hand, held + HAND_KINDS, HAND_KINDS);
            memcpy(hand + HAND_KINDS, held, HAND_KINDS);
        }
        if (pieces != NULL) {
            memcpy(pieces + ply * SLOTS, packed.row[turn], SLOTS);
            for (int b = 0; b < PROMOTED_BYTES; b++)
                promoted[ply * PROMOTED_BYTES + b] = (uint8_t)(packed.flags[turn] >> (8 * b));
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
            move_codes[ply] = (uint16_t)(((view_origin * NUM_SQUARES) + NUM_SQUARES - 1 - destination) * 2
                                         + promote);
        }
        int offset = NUM_TYPES * turn;
        uint8_t target = squares[destination];
        if (origin >= NUM_SQUARES) {                              /* a drop */
            int kind = origin - NUM_SQUARES;
            if (promote || target != 0 || held[HAND_KINDS * turn + kind] == 0)
                return (long)ply;
            held[HAND_KINDS * turn + kind]--;
            squares[destination] = (uint8_t)(kind + 1 + offset);
            rotated[NUM_SQUARES - 1 - destination] = SWAP_COLOURS[squares[destination]];
            if (pieces != NULL) {
                if (!list_insert(&lists, kind + 1, destination))
                    return (long)ply;
                refill(&packed, &lists, squares, held, kind + 1);
            }
        } else {
            uint8_t piece = squares[origin];
            if (piece == 0 || (piece > NUM_TYPES) != (turn == 1))
                return (long)ply;
            uint8_t captured = 0;
            if (target != 0) {
                if ((target > NUM_TYPES) == (turn == 1))
                    return (long)ply;                              /* onto its own piece */
                captured = UNPROMOTED[target > NUM_TYPES ? target - NUM_TYPES : target];
                if (captured == 8)
                    return (long)ply;                              /* a king is never captured */
            }
            int piece_type = piece - offset;
            if (promote) {
                piece_type = PROMOTES_TO[piece_type];
                if (piece_type == 0)
                    return (long)ply;
            }
            if (captured) {
                held[HAND_KINDS * turn + captured - 1]++;
                if (pieces != NULL)
                    list_remove(&lists, captured, destination);
            }
            if (pieces != NULL) {
                list_remove(&lists, CODE_KIND[piece], origin);
                list_insert(&lists, CODE_KIND[piece], destination);
            }
            squares[origin] = 0;
            squares[destination] = (uint8_t)(piece_type + offset);
            rotated[NUM_SQUARES - 1 - origin] = 0;
            rotated[NUM_SQUARES - 1 - destination] = SWAP_COLOURS[squares[destination]];
            if (pieces != NULL) {                 /* the kinds whose slots changed: mover, captured */
                refill(&packed, &lists, squares, held, CODE_KIND[piece]);
                if (captured && captured != CODE_KIND[piece])
                    refill(&packed, &lists, squares, held, captured);
            }
        }
        turn = 1 - turn;
    }
    return -1;
}

static PyObject *replay_game(PyObject *self, PyObject *args) {
    Py_buffer start_board, start_hands, moves, board, hands, move_codes, pieces = {0}, promoted = {0};
    int first_turn;
    if (!PyArg_ParseTuple(args, "y*y*iy*w*w*w*|w*w*", &start_board, &start_hands, &first_turn, &moves, &board,
                          &hands, &move_codes, &pieces, &promoted))
        return NULL;
    long result = -2;
    Py_ssize_t count = moves.len / (Py_ssize_t)sizeof(int64_t);
    int packing = pieces.obj != NULL;
    if (check_size(&start_board, NUM_SQUARES, "start_board")
        && check_size(&start_hands, 2 * HAND_KINDS, "start_hands")
        && check_size(&moves, count * (Py_ssize_t)sizeof(int64_t), "moves")
        && check_size(&board, (count + 1) * NUM_SQUARES, "board")
        && check_size(&hands, (count + 1) * 2 * HAND_KINDS, "hands")
        && check_size(&move_codes, (count + 1) * (Py_ssize_t)sizeof(uint16_t), "move_codes")
        && (!packing || (promoted.obj != NULL && check_size(&pieces, (count + 1) * SLOTS, "pieces")
                         && check_size(&promoted, (count + 1) * PROMOTED_BYTES, "promoted")))) {
        if (first_turn != 0 && first_turn != 1) {
            PyErr_SetString(PyExc_ValueError, "first_turn must be 0 or 1");
        } else {
            Py_BEGIN_ALLOW_THREADS
            result = replay(start_board.buf, start_hands.buf, first_turn, moves.buf, count, board.buf,
                            hands.buf, move_codes.buf, packing ? pieces.buf : NULL,
                            packing ? promoted.buf : NULL);
            Py_END_ALLOW_THREADS
        }
    } else if (packing && promoted.obj == NULL && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "pieces without promoted");
    }
    PyBuffer_Release(&start_board);
    PyBuffer_Release(&start_hands);
    PyBuffer_Release(&moves);
    PyBuffer_Release(&board);
    PyBuffer_Release(&hands);
    PyBuffer_Release(&move_codes);
    if (pieces.obj != NULL)
        PyBuffer_Release(&pieces);
    if (promoted.obj != NULL)
        PyBuffer_Release(&promoted);
    if (result == -2)
        return NULL;
    return PyLong_FromLong(result);
}

/* Index of the lowest set bit of a non-zero mask (GCC/Clang builtins, a loop elsewhere). */
#if defined(__GNUC__) || defined(__clang__)
#define LOWEST_BIT64(m) __builtin_ctzll(m)
#define LOWEST_BIT32(m) __builtin_ctz(m)
#else
static inline int lowest_bit(uint64_t m) { int i = 0; while (!(m & 1)) { m >>= 1; i++; } return i; }
#define LOWEST_BIT64(m) lowest_bit(m)
#define LOWEST_BIT32(m) lowest_bit(m)
#endif

/* The squares of one kind of piece (codes mapped by CODE_KIND into `kinds`, 96 bytes, 81.. zero) as a
 * bit mask: bits 0..63 in *lo, squares 64..80 in the return value. */
#ifdef __SSE2__
#include <emmintrin.h>
static inline uint32_t kind_mask(const uint8_t *kinds, int kind, uint64_t *lo) {
    __m128i k = _mm_set1_epi8((char)kind);
    uint64_t m = 0;
    for (int b = 0; b < 4; b++)
        m |= (uint64_t)(uint16_t)_mm_movemask_epi8(
                 _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(kinds + 16 * b)), k)) << (16 * b);
    *lo = m;
    return (uint32_t)(uint16_t)_mm_movemask_epi8(
               _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(kinds + 64)), k))
           | (uint32_t)(uint16_t)_mm_movemask_epi8(
                 _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(kinds + 80)), k)) << 16;
}
#else
static inline uint32_t kind_mask(const uint8_t *kinds, int kind, uint64_t *lo) {
    uint64_t m = 0;
    uint32_t h = 0;
    for (int s = 0; s < 64; s++)
        m |= (uint64_t)(kinds[s] == kind) << s;
    for (int s = 64; s < NUM_SQUARES; s++)
        h |= (uint32_t)(kinds[s] == kind) << (s - 64);
    *lo = m;
    return h;
}
#endif

/* Each kind's board pieces go to its slots in square order (walking the bits of its square mask),
 * then its pieces in the own hand, in the opponent's hand, and absent pieces. */
static Py_ssize_t pack(const uint8_t *board, const uint8_t *hands, uint8_t *pieces, uint8_t *promoted,
                       Py_ssize_t n) {
    uint8_t kinds[96] = {0};
    for (Py_ssize_t r = 0; r < n; r++) {
        const uint8_t *row = board + r * NUM_SQUARES, *hand = hands + r * 2 * HAND_KINDS;
        uint8_t out[SLOTS];
        uint64_t flags = 0;
        unsigned bad = 0;
        for (int s = 0; s < NUM_SQUARES; s++) {
            uint8_t code = row[s];
            kinds[s] = CODE_KIND[code];
            bad |= code > 2 * NUM_TYPES;                              /* an invalid code is refused */
        }
        if (bad)
            return r;
        for (int kind = 1; kind <= 8; kind++) {
            int slot = KIND_FIRST_SLOT[kind], end = slot + KIND_SLOTS[kind];
            uint64_t lo;
            uint32_t hi = kind_mask(kinds, kind, &lo);
            while (lo || hi) {                                     /* squares 0..63, then 64..80 */
                int s;
                if (lo) {
                    s = LOWEST_BIT64(lo);
                    lo &= lo - 1;
                } else {
                    s = 64 + LOWEST_BIT32(hi);
                    hi &= hi - 1;
                }
                if (slot == end)
                    return r;
                uint8_t code = row[s];
                out[slot] = (uint8_t)(s | CODE_OPPONENT[code]);
                flags |= (uint64_t)CODE_PROMOTED[code] << slot;
                slot++;
            }
            if (kind <= HAND_KINDS) {
                int own = hand[kind - 1], other = hand[HAND_KINDS + kind - 1];
                if (own + other > end - slot)
                    return r;
                for (int i = 0; i < own; i++)
                    out[slot++] = SLOT_IN_HAND;
                for (int i = 0; i < other; i++)
                    out[slot++] = SLOT_IN_HAND | SLOT_OPPONENT;
            }
            while (slot < end)
                out[slot++] = SLOT_ABSENT;
        }
        memcpy(pieces + r * SLOTS, out, SLOTS);
        for (int b = 0; b < PROMOTED_BYTES; b++)
            promoted[r * PROMOTED_BYTES + b] = (uint8_t)(flags >> (8 * b));
    }
    return -1;
}

static PyObject *pack_rows(PyObject *self, PyObject *args) {
    Py_buffer board, hands, pieces, promoted;
    if (!PyArg_ParseTuple(args, "y*y*w*w*", &board, &hands, &pieces, &promoted))
        return NULL;
    Py_ssize_t n = board.len / NUM_SQUARES, result = -2;
    if (check_size(&board, n * NUM_SQUARES, "board") && check_size(&hands, n * 2 * HAND_KINDS, "hands")
        && check_size(&pieces, n * SLOTS, "pieces")
        && check_size(&promoted, n * PROMOTED_BYTES, "promoted")) {
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


/* ---- fourfold_rows: the first position of a game that occurs for the fourth time ----
 *
 * fourfold_rows(pieces, promoted, first_turn) -> the index of the first row whose packed position
 * (pieces [N, 40] and promoted [N, 5], replay's rows: side to move's view) with its side to move (row i:
 * first_turn + i, mod 2) is the same as three earlier rows', or -1. The packed form is canonical (the
 * pieces of each kind in square order), so equal rows are exactly equal positions. One pass with a hash
 * table (rows compared byte for byte when hashes meet): about 10 ns a position where sorting every
 * position's key in numpy took 100 (features.repeated_games). */
typedef struct {
    uint64_t hash;
    int32_t first;                                 /* the row of the first occurrence, -1 for a free entry */
    int32_t count;
} RowEntry;

static inline uint64_t row_hash(const uint8_t *row, const uint8_t *flags, int turn) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)turn, w;
    for (int i = 0; i < SLOTS; i += 8) {
        memcpy(&w, row + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    w = 0;
    memcpy(&w, flags, PROMOTED_BYTES);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

static Py_ssize_t fourfold(const uint8_t *pieces, const uint8_t *promoted, int first_turn, Py_ssize_t n,
                           RowEntry *table, Py_ssize_t mask) {
    for (Py_ssize_t r = 0; r < n; r++) {
        const uint8_t *row = pieces + r * SLOTS, *flags = promoted + r * PROMOTED_BYTES;
        int turn = (int)((first_turn + r) & 1);
        uint64_t h = row_hash(row, flags, turn);
        Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)mask);
        for (;;) {
            RowEntry *e = table + slot;
            if (e->first < 0) {
                e->hash = h;
                e->first = (int32_t)r;
                e->count = 1;
                break;
            }
            if (e->hash == h && ((e->first ^ (int32_t)r) & 1) == 0 /* same side to move */
                && memcmp(pieces + (Py_ssize_t)e->first * SLOTS, row, SLOTS) == 0
                && memcmp(promoted + (Py_ssize_t)e->first * PROMOTED_BYTES, flags, PROMOTED_BYTES) == 0) {
                if (++e->count == 4)
                    return r;
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    return -1;
}

static PyObject *fourfold_rows(PyObject *self, PyObject *args) {
    Py_buffer pieces, promoted;
    int first_turn;
    if (!PyArg_ParseTuple(args, "y*y*i", &pieces, &promoted, &first_turn))
        return NULL;
    Py_ssize_t n = pieces.len / SLOTS, result = -2;
    if (check_size(&pieces, n * SLOTS, "pieces") && check_size(&promoted, n * PROMOTED_BYTES, "promoted")) {
        if (n > INT32_MAX / 2) {
            PyErr_SetString(PyExc_ValueError, "too many rows");
        } else {
            Py_ssize_t size = 64;
            while (size < 2 * n)
                size <<= 1;
            RowEntry *table = PyMem_Malloc((size_t)size * sizeof(RowEntry));
            if (table == NULL) {
                PyErr_NoMemory();
            } else {
                for (Py_ssize_t i = 0; i < size; i++)
                    table[i].first = -1;
                result = fourfold(pieces.buf, promoted.buf, first_turn & 1, n, table, size - 1);
                PyMem_Free(table);
            }
        }
    }
    PyBuffer_Release(&pieces);
    PyBuffer_Release(&promoted);
    if (result == -2)
        return NULL;
    return PyLong_FromSsize_t(result);
}

static PyMethodDef methods[] = {
    {"replay_game", replay_game, METH_VARARGS,
     "replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes[, pieces, "
     "promoted]) -> -1 or a ply"},
    {"pack_rows", pack_rows, METH_VARARGS, "pack_rows(board, hands, pieces, promoted) -> -1 or a row"},
    {"fourfold_rows", fourfold_rows, METH_VARARGS,
     "fourfold_rows(pieces, promoted, first_turn) -> the first row occurring the fourth time, or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode",
                                    "Compiled kernels of shogi_dnn.features.", -1, methods};

PyMODINIT_FUNC PyInit__encode(void) {
    init_tables();
    return PyModule_Create(&module);
}
