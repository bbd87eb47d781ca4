// Tile shapes of the sm80 flash forward kernel and everything derived from them, in one place.
// kBlockM query rows per CTA, split over kWarps warps (each warp owns kBlockM / kWarps rows, i.e.
// kMTiles mma row tiles of 16); kBlockN keys per K/V tile (one cp.async group, one barrier);
// kSubN keys per S tile held in registers (a K/V tile is consumed in kBlockN / kSubN steps, so a
// large tile amortises barriers while S stays small enough for d=128); kStages K/V tiles in flight
// in shared memory. Chosen per head_dim by measurement (docs/perf-history.md).
#pragma once

namespace flashbox::cuda {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_, int kSubN_ = kBlockN_,
          int kMinBlocksPerSM_ = 1, int kQInRegisters_ = (kHeadDim_ <= 64)>
struct FlashFwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;
  static constexpr int kSubN = kSubN_;
  static constexpr int kMinBlocksPerSM = kMinBlocksPerSM_;  // __launch_bounds__ occupancy floor
  static constexpr int kThreads = kWarps * 32;

  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // mma row tiles per warp
  static constexpr int kSTiles = kSubN / 8;          // n8 tiles of one S row block
  static constexpr int kQKSteps = kHeadDim / 16;     // k16 steps of Q*K^T
  static constexpr int kOTiles = kHeadDim / 8;       // n8 tiles of the O accumulator
  static constexpr int kPVSteps = kSubN / 16;        // k16 steps of P*V
  // Q fragments stay in registers when they fit beside S and O; for d=128 they are re-read from
  // shared memory with ldmatrix at every K tile instead.
  static constexpr bool kQInRegisters = kQInRegisters_ != 0;

  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per tile row
  static constexpr int kQTileElems = kBlockM * kHeadDim;
  static constexpr int kKVTileElems = kBlockN * kHeadDim;
  static constexpr int kSmemBytes = (kQTileElems + 2 * kStages * kKVTileElems) * 2;

  static_assert(kRowsPerWarp % 16 == 0, "each warp owns whole 16-row mma tiles");
  static_assert(kSubN % 16 == 0 && kBlockN % kSubN == 0 && kHeadDim % 16 == 0, "tiles are whole k16 steps");
  static_assert(kChunksPerRow >= 8, "the XOR swizzle permutes 8 chunks of a row");
  static_assert(kThreads % kChunksPerRow == 0 && (kThreads / kChunksPerRow) % 8 == 0,
                "each thread copies one fixed chunk column, and its rows share one swizzle phase");
  static_assert(kStages >= 2, "at least double buffering");
};

}  // namespace flashbox::cuda
