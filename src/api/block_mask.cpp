// flashbox_block_mask's checks and its dense table; the rules are listed in block_mask.hpp.
#include "api/block_mask.hpp"

#include <string>

#include "api/arg_text.hpp"
#include "api/ext_validate.hpp"
#include "core/error.hpp"

namespace flashbox::detail {
namespace {

constexpr int64_t kMaxTableBytes = int64_t(1) << 30;  // the dense table the cpu levels read

// One direction of the mask: rows of `rows` entries (q blocks for kv_*, kv blocks for q_*), each
// listing indices below `targets` (kv blocks for kv_*, q blocks for q_*).
struct Lists {
  const char *counts_name, *indices_name;
  const int32_t *counts, *indices;
  int64_t rows, width, targets;
};

std::string at(int64_t bh, int64_t r, int64_t heads) {
  std::string s = "[";  // built by appends: gcc 12 -O3 misreads "literal" + std::string (-Wrestrict)
  s += str(bh / heads) + "][" + str(bh % heads) + "][" + str(r) + "]";
  return s;
}

// Counts within [0, min(width, targets)] and the listed indices within [0, targets), for every row.
int check_lists(const Lists &l, int64_t bh_rows, int64_t heads) {
  const int64_t cap = l.width < l.targets ? l.width : l.targets;
  for (int64_t bh = 0; bh < bh_rows; ++bh)
    for (int64_t r = 0; r < l.rows; ++r) {
      const int64_t row = bh * l.rows + r;
      const int32_t n = l.counts[row];
      if (n < 0 || n > cap)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    std::string(l.counts_name) + at(bh, r, heads) + " = " + str(n) + " is outside [0, " + str(cap) +
                        "] (the row holds " + str(l.width) + " entries and there are " + str(l.targets) + " blocks)");
      for (int64_t x = 0; x < n; ++x) {
        const int32_t idx = l.indices[row * l.width + x];
        if (idx < 0 || idx >= l.targets)
          return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string(l.indices_name) + at(bh, r, heads) + "[" + str(x) +
                                                         "] = " + str(idx) + " is outside [0, " + str(l.targets) +
                                                         ") (the number of blocks)");
      }
    }
  return FLASHBOX_OK;
}

// kv_* lists into the table: each listed block gets `kind`; a block listed twice in a row is refused.
int fill_kinds(const Lists &l, int64_t bh_rows, int64_t heads, uint8_t kind, std::vector<uint8_t> &kinds) {
  for (int64_t bh = 0; bh < bh_rows; ++bh)
    for (int64_t r = 0; r < l.rows; ++r) {
      const int64_t row = bh * l.rows + r;
      for (int64_t x = 0; x < l.counts[row]; ++x) {
        const int32_t c = l.indices[row * l.width + x];
        uint8_t &k = kinds[size_t(row * l.targets + c)];
        if (k != core::kBlockSkipped)
          return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                      std::string(l.indices_name) + at(bh, r, heads) + "[" + str(x) + "] = " + str(c) +
                          " lists a key block this row already lists" +
                          (k == kind ? "" : " in the other list (a block is partial or full, not both)"));
        k = kind;
      }
    }
  return FLASHBOX_OK;
}

// q_* lists against the table: row c of (b, h) lists exactly the q blocks r with kind(r, c) = kind.
int check_transpose(const Lists &l, int64_t bh_rows, int64_t heads, uint8_t kind, int64_t q_blocks,
                    const std::vector<uint8_t> &kinds, std::vector<uint8_t> &seen) {
  const int64_t kv_blocks = l.rows;
  for (int64_t bh = 0; bh < bh_rows; ++bh)
    for (int64_t c = 0; c < kv_blocks; ++c) {
      const int64_t row = bh * kv_blocks + c;
      int64_t expected = 0;
      for (int64_t r = 0; r < q_blocks; ++r) expected += kinds[size_t((bh * q_blocks + r) * kv_blocks + c)] == kind;
      if (l.counts[row] != expected)
        return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                    std::string(l.counts_name) + at(bh, c, heads) + " = " + str(l.counts[row]) + " but " +
                        str(expected) + " query blocks list key block " + str(c) +
                        (kind == core::kBlockFull ? " in full_kv_indices" : " in kv_indices") +
                        " (the q_* tables must be the transposes of the kv_* ones)");
      seen.assign(size_t(q_blocks), 0);
      for (int64_t x = 0; x < expected; ++x) {
        const int32_t r = l.indices[row * l.width + x];
        if (seen[size_t(r)] || kinds[size_t((bh * q_blocks + r) * kv_blocks + c)] != kind)
          return fail(FLASHBOX_ERR_INVALID_ARGUMENT,
                      std::string(l.indices_name) + at(bh, c, heads) + "[" + str(x) + "] = " + str(r) +
                          (seen[size_t(r)]
                               ? " is listed twice"
                               : " but query block " + str(r) + " does not list key block " + str(c) +
                                     (kind == core::kBlockFull ? " in full_kv_indices" : " in kv_indices")) +
                          " (the q_* tables must be the transposes of the kv_* ones)");
        seen[size_t(r)] = 1;
      }
    }
  return FLASHBOX_OK;
}

// Both pointers of a pair set or neither.
int pair(const int32_t *counts, const int32_t *indices, const char *counts_name, const char *indices_name) {
  if (bool(counts) == bool(indices)) return FLASHBOX_OK;
  return fail(FLASHBOX_ERR_NULL_POINTER, std::string(counts ? indices_name : counts_name) + " is NULL but " +
                                             (counts ? counts_name : indices_name) + " is set (give both or neither)");
}

}  // namespace

int build_block_table(const flashbox_attention_args &a, const flashbox_block_mask &bm, const ByteView *outputs,
                      const char *const *output_names, int n_outputs, std::vector<uint8_t> &kinds,
                      core::BlockTable &table) {
  if (bm.struct_size != int32_t(sizeof(flashbox_block_mask)))
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, "block_mask->struct_size = " + str(bm.struct_size) + " must be " +
                                                   str(int64_t(sizeof(flashbox_block_mask))) +
                                                   " (sizeof(flashbox_block_mask))");
  if (bm.batch != 1 && bm.batch != a.batch)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "block_mask->batch = " + str(bm.batch) + " must be 1 (broadcast) or batch = " + str(a.batch));
  if (bm.heads != 1 && bm.heads != a.heads_q)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "block_mask->heads = " + str(bm.heads) + " must be 1 (broadcast) or heads_q = " + str(a.heads_q));
  if (bm.q_block_size < 1 || bm.kv_block_size < 1)
    return fail(FLASHBOX_ERR_INVALID_SIZE, "block_mask->q_block_size = " + str(bm.q_block_size) +
                                               ", kv_block_size = " + str(bm.kv_block_size) + " must be >= 1");
  if (!bm.kv_num_blocks || !bm.kv_indices)
    return fail(FLASHBOX_ERR_NULL_POINTER, std::string("block_mask->") +
                                               (bm.kv_num_blocks ? "kv_indices" : "kv_num_blocks") +
                                               " is NULL (a block mask needs kv_num_blocks and kv_indices)");
  if (int rc = pair(bm.full_kv_num_blocks, bm.full_kv_indices, "block_mask->full_kv_num_blocks",
                    "block_mask->full_kv_indices"))
    return rc;
  if (int rc = pair(bm.q_num_blocks, bm.q_indices, "block_mask->q_num_blocks", "block_mask->q_indices")) return rc;
  if (int rc =
          pair(bm.full_q_num_blocks, bm.full_q_indices, "block_mask->full_q_num_blocks", "block_mask->full_q_indices"))
    return rc;
  const bool has_full = bm.full_kv_num_blocks, has_q = bm.q_num_blocks, has_full_q = bm.full_q_num_blocks;
  if (has_full_q && (!has_q || !has_full))
    return fail(FLASHBOX_ERR_INVALID_ARGUMENT, std::string("block_mask->full_q_num_blocks is set without ") +
                                                   (!has_q ? "q_num_blocks" : "full_kv_num_blocks") +
                                                   " (the transposes come with what they transpose)");
  if (has_q && has_full && !has_full_q)
    return fail(FLASHBOX_ERR_NULL_POINTER,
                "block_mask->full_q_num_blocks is NULL but q_num_blocks and "
                "full_kv_num_blocks are set (the full blocks' transposes are needed too)");
  if (bm.max_kv_blocks < 1)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "block_mask->max_kv_blocks = " + str(bm.max_kv_blocks) + " must be >= 1 (the last dim of kv_indices)");
  if (has_q && bm.max_q_blocks < 1)
    return fail(FLASHBOX_ERR_INVALID_SIZE,
                "block_mask->max_q_blocks = " + str(bm.max_q_blocks) + " must be >= 1 with q_indices (its last dim)");

  const int64_t bh_rows = bm.batch * bm.heads;
  const int64_t q_blocks = (a.seqlen_q + bm.q_block_size - 1) / bm.q_block_size;
  const int64_t kv_blocks = (a.seqlen_k + bm.kv_block_size - 1) / bm.kv_block_size;
  const __int128 table_bytes = __int128(bh_rows) * q_blocks * kv_blocks;
  const __int128 kv_entries = __int128(bh_rows) * q_blocks * bm.max_kv_blocks;
  const __int128 q_entries = has_q ? __int128(bh_rows) * kv_blocks * bm.max_q_blocks : 0;
  if (kv_entries * 4 > INT64_MAX || q_entries * 4 > INT64_MAX)
    return fail(FLASHBOX_ERR_SIZE_OVERFLOW,
                "block_mask: the index tables' sizes (batch x heads x blocks x "
                "max_*_blocks x 4 bytes) overflow int64");
  if (table_bytes > kMaxTableBytes)
    return fail(FLASHBOX_ERR_OUT_OF_MEMORY,
                "block_mask: batch x heads x " + str(q_blocks) + " x " + str(kv_blocks) +
                    " blocks need a dense table of more than 1 GiB on device = cpu (use larger blocks or broadcast)");

  const Lists kv{"block_mask->kv_num_blocks",
                 "block_mask->kv_indices",
                 bm.kv_num_blocks,
                 bm.kv_indices,
                 q_blocks,
                 bm.max_kv_blocks,
                 kv_blocks};
  const Lists full_kv{"block_mask->full_kv_num_blocks",
                      "block_mask->full_kv_indices",
                      bm.full_kv_num_blocks,
                      bm.full_kv_indices,
                      q_blocks,
                      bm.max_kv_blocks,
                      kv_blocks};
  const Lists q{"block_mask->q_num_blocks",
                "block_mask->q_indices",
                bm.q_num_blocks,
                bm.q_indices,
                kv_blocks,
                bm.max_q_blocks,
                q_blocks};
  const Lists full_q{"block_mask->full_q_num_blocks",
                     "block_mask->full_q_indices",
                     bm.full_q_num_blocks,
                     bm.full_q_indices,
                     kv_blocks,
                     bm.max_q_blocks,
                     q_blocks};
  const Lists *all[4] = {&kv, has_full ? &full_kv : nullptr, has_q ? &q : nullptr, has_full_q ? &full_q : nullptr};
  for (const Lists *l : all) {
    if (!l) continue;
    if (int rc = check_input_buffer(l->counts, bh_rows * l->rows * 4, l->counts_name, outputs, output_names, n_outputs))
      return rc;
    if (int rc = check_input_buffer(l->indices, bh_rows * l->rows * l->width * 4, l->indices_name, outputs,
                                    output_names, n_outputs))
      return rc;
  }
  if (a.device != FLASHBOX_CPU) return FLASHBOX_OK;  // refused by the caller; values live on the device

  for (const Lists *l : all)
    if (l)
      if (int rc = check_lists(*l, bh_rows, bm.heads)) return rc;
  kinds.assign(size_t(table_bytes), core::kBlockSkipped);
  if (int rc = fill_kinds(kv, bh_rows, bm.heads, core::kBlockPartial, kinds)) return rc;
  if (has_full)
    if (int rc = fill_kinds(full_kv, bh_rows, bm.heads, core::kBlockFull, kinds)) return rc;
  std::vector<uint8_t> seen;
  if (has_q)
    if (int rc = check_transpose(q, bh_rows, bm.heads, core::kBlockPartial, q_blocks, kinds, seen)) return rc;
  if (has_full_q)
    if (int rc = check_transpose(full_q, bh_rows, bm.heads, core::kBlockFull, q_blocks, kinds, seen)) return rc;

  table = core::BlockTable{};
  table.kind = kinds.data();
  table.q_block = bm.q_block_size, table.kv_block = bm.kv_block_size;
  table.q_blocks = q_blocks, table.kv_blocks = kv_blocks;
  table.batches = bm.batch, table.heads = bm.heads;
  return FLASHBOX_OK;
}

}  // namespace flashbox::detail
