// The online softmax of one row, block by block, with the state after every block (SPEC step 2).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace flashbox::cpu {

struct OnlineSoftmaxStep {
  int64_t block_index = 0;           // 0-based
  int64_t numbers_read = 0;          // values consumed so far, this block included
  std::vector<double> block_values;  // the values this block read
  double block_max = 0;              // max of this block's values
  double m_old = 0;                  // running max before the block (-inf before the first)
  double m = 0;                      // running max after the block
  double rescale = 0;                // exp(m_old - m): what the old l (and acc) is multiplied by
  double l = 0;                      // sum of exp(x - m) over the values read so far
};

struct OnlineSoftmaxTrace {
  std::vector<double> values;
  int64_t block = 0;
  std::vector<OnlineSoftmaxStep> steps;
  std::vector<double> softmax;  // exp(x - m) / l from the final state (fp32 arithmetic)
  std::vector<double> exact;    // softmax computed directly in fp64
  double max_abs_error = 0;     // max |softmax - exact|
};

// 8 default scores whose blocks of 2 raise the running max three times, so every rescale shows.
std::vector<double> default_trace_values();

// Runs the online softmax over `values` in blocks of `block` numbers (the last may be shorter), in
// fp32 like the kernels. Throws std::invalid_argument on empty values, block < 1 or a non-finite value.
OnlineSoftmaxTrace online_softmax_trace(std::span<const double> values, int64_t block);

}  // namespace flashbox::cpu
