// The progress line's figures and when it prints (to a file, as under
// `tandem launch`: one line per tenth of the epoch).
#include "progress_line.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace fashion_mnist {
namespace {

std::string ReadAll(FILE* f) {
  std::rewind(f);
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  return text;
}

size_t CountLines(const std::string& text) {
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

class ProgressLineTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ProgressLineTest, PrintsOncePerTenthWithTheFigures) {
  const int64_t steps = GetParam();
  FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  ProgressLine progress(out, 2, 3, steps, 128);
  // Every step: loss 0.5, 0.125 s of which 0.03125 s communication (exact in binary).
  for (int64_t s = 1; s <= steps; ++s) progress.Update(s, 0.5, 0.125, 0.03125);
  const std::string text = ReadAll(out);
  std::fclose(out);
  EXPECT_EQ(CountLines(text), static_cast<size_t>(std::min<int64_t>(steps, 10))) << text;
  const std::string last = "epoch 2/3 [####################] 100% step " + std::to_string(steps) +
                           "/" + std::to_string(steps) + " ";
  EXPECT_NE(text.find(last), std::string::npos) << text;
  EXPECT_NE(text.find("loss 0.5000 1024 samples/s comm 25%"), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(progress.samples_per_second(), 1024.0);
  EXPECT_DOUBLE_EQ(progress.comm_share(), 0.25);
  EXPECT_DOUBLE_EQ(progress.mean_loss(), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Steps, ProgressLineTest, ::testing::Values(1, 7, 10, 95, 937));

TEST(ProgressLine, WithoutAStreamOnlyKeepsFigures) {
  ProgressLine progress(nullptr, 1, 1, 4, 10);
  progress.Update(1, 2.0, 0.5, 0.0);
  progress.Update(2, 1.0, 0.5, 0.5);
  EXPECT_DOUBLE_EQ(progress.mean_loss(), 1.5);
  EXPECT_DOUBLE_EQ(progress.samples_per_second(), 20.0);
  EXPECT_DOUBLE_EQ(progress.comm_share(), 0.5);
}

}  // namespace
}  // namespace fashion_mnist
