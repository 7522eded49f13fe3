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

static int check_size(Py_buffer *buffer, Py_ssize_t bytes, const char *name) {
    if (buffer->len != bytes) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", name, buffer->len, bytes);
        return 0;
    }
    return 1;
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
    {"replay_game", replay_game, METH_VARARGS,
     "replay_game(start_board, start_hands, first_turn, moves, board, hands, move_codes[, pieces, "
     "promoted]) -> -1 or a ply"},
    {"pack_rows", pack_rows, METH_VARARGS, "pack_rows(board, hands, pieces, promoted) -> -1 or a row"},
    {"csa_move_lines", csa_move_lines, METH_VARARGS,
     "csa_move_lines(text, offset) -> consecutive well-formed CSA move lines from offset"},
    {"fourfold_rows", fourfold_rows, METH_VARARGS,
     "fourfold_rows(pieces, promoted, first_turn) -> the first row occurring the fourth time, or -1"},
    {"csa_eval_run", csa_eval_run, METH_VARARGS,
     "csa_eval_run(text, offset, number, moves_before, evals) -> (characters, lines, moves, move_lines)"},
    {"in_check_rows", in_check_rows, METH_VARARGS,
     "in_check_rows(board) -> bytes: 1 where the side to move (Black, in the rows' view) is in check"},
    {"play_csa", play_csa, METH_VARARGS,
     "play_csa(board, hands, turn, tokens, codes) -> moves played (board and hands updated in place)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_encode",
                                    "Compiled kernels of shogi_dnn.features.", -1, methods};

PyMODINIT_FUNC PyInit__encode(void) {
    init_tables();
    init_name_types();
    return PyModule_Create(&module);
}
