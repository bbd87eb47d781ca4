// Checkpoint readers on files written by the writers (Hugging Face safetensors in fp32/fp16/bf16,
// with and without the "transformer." prefix; llm.c fp32/bf16) and on hand-corrupted files: every
// problem must be a Gpt2Error that says what is wrong, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/dtype.hpp"
#include "gpt2/checkpoint/checkpoint.hpp"
#include "gpt2/checkpoint/safetensors.hpp"
#include "gpt2_test_util.hpp"

using namespace flashbox::gpt2;
using gpt2_test::error_of;
using gpt2_test::ScratchDir;

namespace {

// Largest |a - b| / (|b| + 1e-30) allowed for a value stored in `dtype` and read back.
double tolerance(const std::string &dtype) { return dtype == "F32" ? 0.0 : dtype == "F16" ? 1e-3 : 8e-3; }

void expect_same_weights(const Gpt2Weights &a, const Gpt2Weights &b, double rel_tol) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.config().n_layer, b.config().n_layer);
  EXPECT_EQ(a.config().n_head, b.config().n_head);
  EXPECT_EQ(a.config().n_embd, b.config().n_embd);
  EXPECT_EQ(a.config().vocab_size, b.config().vocab_size);
  EXPECT_EQ(a.config().n_ctx, b.config().n_ctx);
  int64_t bad = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    // fp16 keeps values below 6e-5 as subnormals with an absolute spacing of 6e-8.
    if (std::fabs(a.data()[i] - b.data()[i]) > rel_tol * std::fabs(b.data()[i]) + (rel_tol > 0 ? 6e-8 : 0.0)) ++bad;
  EXPECT_EQ(bad, 0) << "of " << a.size() << " parameters";
}

// Rewrites one tensor's header entry of a safetensors file written by write_safetensors.
std::string with_header_edit(const std::string &bytes, const std::string &from, const std::string &to) {
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  std::string header = bytes.substr(8, len);
  const auto at = header.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  header.replace(at, from.size(), to);
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + bytes.substr(8 + len);
}

}  // namespace

class SafetensorsRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(SafetensorsRoundTrip, WriterThenReaderGivesTheSameModel) {
  ScratchDir dir;
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 7);
  write_hf_safetensors(w, dir / "m.safetensors", GetParam());
  const Gpt2Weights r = load_checkpoint(dir / "m.safetensors");
  expect_same_weights(r, w, tolerance(GetParam()));
  // The file holds Hugging Face's layout: c_attn.weight as Conv1D [in, out].
  const SafetensorsFile f(dir / "m.safetensors");
  ASSERT_NE(f.find("h.1.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(f.find("h.1.attn.c_attn.weight")->shape, (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(f.find("h.0.mlp.c_proj.weight")->shape, (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(f.find("ln_f.bias")->shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(f.find("wte.weight")->dtype, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SafetensorsRoundTrip, ::testing::Values("F32", "F16", "BF16"));

TEST(Checkpoint, ConvOneDWeightsAreTransposedOnRead) {
  // Write a file by hand in Hugging Face's layout and check one element lands where llm.c's
  // [out, in] layout puts it: c_attn.weight[i][o] (HF) == qkvw[o][i] (ours).
  ScratchDir dir;
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 3);
  write_hf_safetensors(w, dir / "m.safetensors");
  const SafetensorsFile f(dir / "m.safetensors");
  std::vector<float> hf(32 * 96);
  const std::vector<int64_t> shape{32, 96};
  f.read_f32("h.0.attn.c_attn.weight", shape, hf.data());
  const auto qkvw = w.layer(Param::QkvW, 0);  // [96, 32]
  for (int i : {0, 5, 31})
    for (int o : {0, 17, 95}) EXPECT_EQ(hf[size_t(i * 96 + o)], qkvw[size_t(o * 32 + i)]);
}

TEST(Checkpoint, TransformerPrefixAndExtraTensorsAreAccepted) {
  ScratchDir dir;
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 4);
  write_hf_safetensors(w, dir / "plain.safetensors");
  std::string bytes = gpt2_test::read_bytes(dir / "plain.safetensors");
  // Prefix every tensor name: "h. -> "transformer.h. etc.
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  std::string header = bytes.substr(8, len);
  for (const char *stem : {"\"h.", "\"wte.", "\"wpe.", "\"ln_f."}) {
    const std::string from = stem, to = std::string("\"transformer.") + (stem + 1);
    for (size_t at = header.find(from); at != std::string::npos; at = header.find(from, at + to.size()))
      header.replace(at, from.size(), to);
  }
  // Tensors a GPT-2 reader must tolerate: the causal-mask buffer older checkpoints carry, and an
  // lm_head.weight that is wte again (tied), here sharing wte's bytes.
  const auto wte_at = header.find("\"transformer.wte.weight\"");
  const auto offsets_at = header.find("\"data_offsets\"", wte_at);
  const std::string wte_offsets = header.substr(offsets_at, header.find(']', offsets_at) + 1 - offsets_at);
  header.insert(1,
                "\"transformer.h.0.attn.bias\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[0,0]},"
                "\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[97,32]," +
                    wte_offsets + "},");
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  gpt2_test::write_bytes(dir / "prefixed.safetensors", out + header + bytes.substr(8 + len));
  ASSERT_NE(SafetensorsFile(dir / "prefixed.safetensors").find("lm_head.weight"), nullptr);
  expect_same_weights(load_checkpoint(dir / "prefixed.safetensors"), w, 0.0);
}

TEST(Checkpoint, HeadsComeFromMetadataOrOverride) {
  ScratchDir dir;
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 5);
  write_hf_safetensors(w, dir / "m.safetensors");
  EXPECT_EQ(load_checkpoint(dir / "m.safetensors").config().n_head, 2);
  EXPECT_EQ(load_checkpoint(dir / "m.safetensors", 4).config().n_head, 4);
  EXPECT_NE(error_of([&] { load_checkpoint(dir / "m.safetensors", 5); }).find("do not divide"), std::string::npos);
}

TEST(Checkpoint, LlmcRoundTripFp32AndBf16) {
  ScratchDir dir;
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 9);
  write_llmc_checkpoint(w, dir / "m.bin", false);
  write_llmc_checkpoint(w, dir / "m_bf16.bin", true);
  expect_same_weights(load_checkpoint(dir / "m.bin"), w, 0.0);
  expect_same_weights(load_checkpoint(dir / "m_bf16.bin"), w, tolerance("BF16"));
  // Vocabulary 97 is padded to 128 rows of wte in the file.
  const uint64_t params = uint64_t(w.size()) + uint64_t(128 - 97) * 32;
  EXPECT_EQ(gpt2_test::read_bytes(dir / "m.bin").size(), 1024 + params * 4);
  EXPECT_EQ(gpt2_test::read_bytes(dir / "m_bf16.bin").size(), 1024 + params * 2);
}

TEST(Checkpoint, CorruptSafetensorsAreClearErrors) {
  ScratchDir dir;
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 1);
  write_hf_safetensors(w, dir / "good.safetensors");
  const std::string good = gpt2_test::read_bytes(dir / "good.safetensors");
  auto error_for = [&](const std::string &bytes) {
    gpt2_test::write_bytes(dir / "bad.safetensors", bytes);
    return error_of([&] { load_checkpoint(dir / "bad.safetensors"); });
  };
  EXPECT_NE(error_for(good.substr(0, good.size() - 100)).find("outside"), std::string::npos) << "truncated data";
  EXPECT_NE(error_for(good.substr(0, 5)).find("truncated"), std::string::npos) << "shorter than the length field";
  EXPECT_NE(error_for(good.substr(0, 200)).find("header length"), std::string::npos) << "truncated header";
  std::string garbage = good;
  garbage[8] = '[';
  garbage[9] = '!';
  EXPECT_NE(error_for(garbage).find("not valid JSON"), std::string::npos);
  std::string huge = good;
  huge[7] = char(0x7f);
  EXPECT_NE(error_for(huge).find("header length"), std::string::npos);
  EXPECT_NE(
      error_for(with_header_edit(good, "\"h.1.ln_2.bias\"", "\"h.1.ln_2.bogus\"")).find("h.1.ln_2.bias' is missing"),
      std::string::npos);
  // A shape that disagrees with the byte count, then one that agrees but is not GPT-2's.
  EXPECT_NE(error_for(with_header_edit(good, "\"shape\":[32,96]", "\"shape\":[32,97]")).find("bytes for shape"),
            std::string::npos);
  EXPECT_NE(error_for(with_header_edit(good, "\"shape\":[32,96]", "\"shape\":[96,32]")).find("expected [32, 96]"),
            std::string::npos);
  EXPECT_NE(error_for(with_header_edit(good, "\"dtype\":\"F32\",\"shape\":[32]", "\"dtype\":\"I32\",\"shape\":[32]"))
                .find("only F32, F16 and BF16"),
            std::string::npos);
  EXPECT_NE(error_for(with_header_edit(good, "\"wte.weight\"", "\"xte.weight\"")).find("not a GPT-2 checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_checkpoint(dir / "does_not_exist.safetensors"); }).find("cannot open"),
            std::string::npos);
}

TEST(Checkpoint, CorruptLlmcFilesAreClearErrors) {
  ScratchDir dir;
  const Gpt2Weights w = gpt2_test::seeded(gpt2_test::micro_config(), 2);
  write_llmc_checkpoint(w, dir / "good.bin", false);
  const std::string good = gpt2_test::read_bytes(dir / "good.bin");
  auto error_for = [&](const std::string &bytes) {
    gpt2_test::write_bytes(dir / "bad.bin", bytes);
    return error_of([&] { load_checkpoint(dir / "bad.bin"); });
  };
  auto with_int = [&](int index, int32_t value) {
    std::string b = good;
    std::memcpy(b.data() + 4 * index, &value, 4);
    return b;
  };
  EXPECT_NE(error_for(good.substr(0, good.size() - 4)).find("truncated"), std::string::npos);
  EXPECT_NE(error_for(good.substr(0, 100)).find("truncated"), std::string::npos);
  EXPECT_NE(error_for(good + "xxxx").find("more than the header"), std::string::npos);
  EXPECT_NE(error_for(with_int(0, 1234)).find("magic 1234"), std::string::npos);
  EXPECT_NE(error_for(with_int(1, 4)).find("version 4"), std::string::npos);
  EXPECT_NE(error_for(with_int(6, 33)).find("corrupt header"), std::string::npos) << "channels not divisible by heads";
  EXPECT_NE(error_for(with_int(7, 50)).find("padded vocabulary"), std::string::npos);
  EXPECT_NE(error_for(with_int(4, 3)).find("truncated"), std::string::npos) << "more layers than the file holds";
  EXPECT_NE(error_for(with_int(4, -1)).find("corrupt header"), std::string::npos);
  // A header asking for ~50 TB must be refused from the file size, not by trying to allocate it.
  std::string huge = with_int(4, 1000);
  const int32_t wide = 1 << 20;
  std::memcpy(huge.data() + 24, &wide, 4);
  EXPECT_NE(error_for(huge).find("truncated"), std::string::npos);
}
