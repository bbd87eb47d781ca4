// The loopback transport on the CPU: NCCL's matching rules (the k-th send a -> b meets b's k-th
// receive from a, whatever the posting order), all-gather in rank order, reduce-scatter sums, and
// unmatched posts rejected with a message instead of a hang or a stray copy.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/transport.hpp"

namespace flashbox::cp {
namespace {

TEST(Loopback, SendsMeetReceivesInPostingOrder) {
  auto ops = make_cpu_ops();
  auto t = make_loopback_transport(*ops, 3);
  ASSERT_TRUE(t);
  // A ring shift, two messages per pair, receives posted before sends on rank 1.
  std::vector<int> send[3][2], recv[3][2];
  for (int r = 0; r < 3; ++r)
    for (int m = 0; m < 2; ++m) send[r][m] = {10 * r + m, 100 + r}, recv[r][m] = {-1, -1};
  for (int r : {1, 0, 2}) {
    ASSERT_EQ(t->group_begin(r), 0);
    const int next = (r + 1) % 3, prev = (r + 2) % 3;
    for (int m = 0; m < 2; ++m) {
      if (r == 1) ASSERT_EQ(t->recv(r, recv[r][m].data(), 8, prev, nullptr), 0);
      ASSERT_EQ(t->send(r, send[r][m].data(), 8, next, nullptr), 0);
      if (r != 1) ASSERT_EQ(t->recv(r, recv[r][m].data(), 8, prev, nullptr), 0);
    }
    ASSERT_EQ(t->group_end(r, nullptr), 0);
  }
  EXPECT_EQ(recv[0][0][0], -1) << "nothing moves before flush";
  ASSERT_EQ(t->flush(), 0) << last_error_message();
  for (int r = 0; r < 3; ++r)
    for (int m = 0; m < 2; ++m) EXPECT_EQ(recv[r][m], send[(r + 2) % 3][m]) << "rank " << r << " message " << m;
}

TEST(Loopback, AllGatherAndReduceScatter) {
  auto ops = make_cpu_ops();
  const int world = 4;
  auto t = make_loopback_transport(*ops, world);
  std::vector<float> mine[world], all[world], sums[world], parts[world];
  for (int r = 0; r < world; ++r) {
    mine[r] = {float(r), float(r) + 0.5f};
    all[r].assign(2 * world, -1);
    parts[r].resize(3 * world);
    for (int i = 0; i < 3 * world; ++i) parts[r][size_t(i)] = float(r * 1000 + i);
    sums[r].assign(3, -1);
    ASSERT_EQ(t->all_gather(r, mine[r].data(), all[r].data(), 8, nullptr), 0);
    ASSERT_EQ(t->reduce_scatter_sum(r, parts[r].data(), sums[r].data(), 3, nullptr), 0);
  }
  ASSERT_EQ(t->flush(), 0) << last_error_message();
  for (int r = 0; r < world; ++r) {
    for (int j = 0; j < world; ++j) {
      EXPECT_EQ(all[r][size_t(2 * j)], float(j));
      EXPECT_EQ(all[r][size_t(2 * j + 1)], float(j) + 0.5f);
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(sums[r][size_t(i)], float((0 + 1000 + 2000 + 3000) + 4 * (3 * r + i)));
  }
}

TEST(Loopback, UnmatchedPostsAreErrors) {
  auto ops = make_cpu_ops();
  auto t = make_loopback_transport(*ops, 2);
  int a = 1, b = 0;
  ASSERT_EQ(t->send(0, &a, 4, 1, nullptr), 0);
  EXPECT_EQ(t->flush(), FLASHBOX_ERR_INTERNAL);
  EXPECT_NE(std::string(last_error_message()).find("no matching"), std::string::npos) << last_error_message();
  EXPECT_EQ(b, 0);
  ASSERT_EQ(t->recv(1, &b, 4, 0, nullptr), 0);
  EXPECT_EQ(t->flush(), FLASHBOX_ERR_INTERNAL);
  ASSERT_EQ(t->send(0, &a, 4, 1, nullptr), 0);
  ASSERT_EQ(t->recv(1, &b, 8, 0, nullptr), 0);
  EXPECT_EQ(t->flush(), FLASHBOX_ERR_INTERNAL) << "sizes differ";
  float x = 1, y = 0;
  ASSERT_EQ(t->all_gather(0, &x, &y, 4, nullptr), 0);
  EXPECT_EQ(t->flush(), FLASHBOX_ERR_INTERNAL) << "a collective of one of two ranks";
  EXPECT_EQ(y, 0.0f);
}

}  // namespace
}  // namespace flashbox::cp
