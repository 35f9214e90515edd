// The IDX reader and the Fashion-MNIST split loader against files written by
// the test, plain and gzipped, good and broken; and against Debian's files
// when dataset-fashion-mnist is installed.
#include "idx_file.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fashion_mnist_data.h"
#include "tandem/error.h"

namespace fashion_mnist {
namespace {

enum class Encoding { kPlain, kGzip };

std::vector<uint8_t> IdxBytes(uint8_t type, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    bytes.push_back(static_cast<uint8_t>(d >> 24));
    bytes.push_back(static_cast<uint8_t>(d >> 16));
    bytes.push_back(static_cast<uint8_t>(d >> 8));
    bytes.push_back(static_cast<uint8_t>(d));
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::vector<uint8_t> Ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

// A fresh directory per test, removed afterwards.
class IdxFileTest : public ::testing::TestWithParam<Encoding> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("idx_file_test_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `bytes` as "<dir>/<stem>" (plain) or "<dir>/<stem>.gz" and returns the path.
  std::string Write(const std::string& stem, const std::vector<uint8_t>& bytes) {
    std::string path = (dir_ / stem).string();
    if (GetParam() == Encoding::kGzip) {
      path += ".gz";
      gzFile f = gzopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      if (!bytes.empty()) {
        EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                  static_cast<int>(bytes.size()));
      }
      EXPECT_EQ(gzclose(f), Z_OK);
    } else {
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }

  std::filesystem::path dir_;
};

// The message of what `f` throws as tandem::IoError ("" when it does not throw).
template <typename F>
std::string IoErrorOf(F f) {
  try {
    f();
  } catch (const tandem::IoError& e) {
    return e.what();
  }
  return "";
}

TEST_P(IdxFileTest, ReadsEveryShapeItWrote) {
  const std::vector<std::vector<uint32_t>> shapes = {
      {5}, {3, 4}, {2, 28, 28}, {2, 3, 4, 5}, {0, 28, 28}};
  for (const auto& dims : shapes) {
    uint64_t n = 1;
    for (uint32_t d : dims) n *= d;
    const std::vector<uint8_t> data = Ramp(n);
    const IdxArray array = ReadIdxFile(Write("a-idx", IdxBytes(kIdxUnsignedByte, dims, data)));
    EXPECT_EQ(array.dims, dims);
    EXPECT_EQ(array.num_elements(), n);
    EXPECT_EQ(array.data, data);
  }
}

TEST_P(IdxFileTest, MissingFileNamesThePath) {
  const std::string path = (dir_ / "absent-idx1-ubyte").string();
  const std::string message = IoErrorOf([&] { ReadIdxFile(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("cannot open"), std::string::npos) << message;
}

TEST_P(IdxFileTest, TruncatedMagic) {
  const std::string path = Write("short", {0, 0});
  const std::string message = IoErrorOf([&] { ReadIdxFile(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("truncated header: 2 bytes"), std::string::npos) << message;
}

TEST_P(IdxFileTest, TruncatedDimensionList) {
  // Three dimensions announced, one and a half given.
  const std::string path = Write("short-dims", {0, 0, 8, 3, 0, 0, 0, 9, 0, 0});
  const std::string message = IoErrorOf([&] { ReadIdxFile(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("3 dimensions need 16 header bytes, the file has 10"), std::string::npos)
      << message;
}

TEST_P(IdxFileTest, WrongMagic) {
  std::vector<uint8_t> bytes = IdxBytes(kIdxUnsignedByte, {4}, Ramp(4));
  bytes[0] = 0x1f;
  const std::string path = Write("bad-magic", bytes);
  const std::string message = IoErrorOf([&] { ReadIdxFile(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("wrong magic 1f 00 08 01"), std::string::npos) << message;
}

TEST_P(IdxFileTest, UnsupportedElementTypeAndDimensions) {
  const std::string floats = Write("floats", IdxBytes(0x0D, {1}, {0, 0, 0, 0}));
  std::string message = IoErrorOf([&] { ReadIdxFile(floats); });
  EXPECT_NE(message.find("element type 0x0d is not supported"), std::string::npos) << message;
  const std::string scalar = Write("scalar", {0, 0, 8, 0});
  message = IoErrorOf([&] { ReadIdxFile(scalar); });
  EXPECT_NE(message.find("0 dimensions; expected 1 to 4"), std::string::npos) << message;
}

TEST_P(IdxFileTest, FewerDataBytesThanTheHeaderPromises) {
  const std::string path =
      Write("truncated", IdxBytes(kIdxUnsignedByte, {3, 28, 28}, Ramp(3 * 784 - 5)));
  const std::string message = IoErrorOf([&] { ReadIdxFile(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("promises 3 x 28 x 28 = 2352 data bytes, the file holds 2347 (truncated)"),
            std::string::npos)
      << message;
}

TEST_P(IdxFileTest, MoreDataBytesThanTheHeaderPromises) {
  const std::string path = Write("trailing", IdxBytes(kIdxUnsignedByte, {6}, Ramp(9)));
  const std::string message = IoErrorOf([&] { ReadIdxFile(path); });
  EXPECT_NE(message.find("promises 6 = 6 data bytes, the file holds 9 (trailing bytes)"),
            std::string::npos)
      << message;
}

TEST_P(IdxFileTest, LoadSplitPairsImagesAndLabels) {
  const std::vector<uint8_t> pixels = Ramp(4 * 784);
  const std::vector<uint8_t> labels = {9, 0, 3, 7};
  Write("t10k-images-idx3-ubyte", IdxBytes(kIdxUnsignedByte, {4, 28, 28}, pixels));
  Write("t10k-labels-idx1-ubyte", IdxBytes(kIdxUnsignedByte, {4}, labels));
  const Split split = LoadSplit(dir_.string(), "t10k");
  EXPECT_EQ(split.count, 4);
  EXPECT_EQ(split.pixels, pixels);
  EXPECT_EQ(split.labels, labels);
}

TEST_P(IdxFileTest, LoadSplitRejectsACountMismatch) {
  const std::string images =
      Write("train-images-idx3-ubyte", IdxBytes(kIdxUnsignedByte, {3, 28, 28}, Ramp(3 * 784)));
  const std::string labels =
      Write("train-labels-idx1-ubyte", IdxBytes(kIdxUnsignedByte, {2}, {1, 2}));
  const std::string message = IoErrorOf([&] { LoadSplit(dir_.string(), "train"); });
  EXPECT_NE(message.find("count mismatch: images file " + images + " holds 3 images, labels file " +
                         labels + " holds 2 labels"),
            std::string::npos)
      << message;
}

TEST_P(IdxFileTest, LoadSplitRejectsBadShapesAndLabels) {
  Write("train-images-idx3-ubyte", IdxBytes(kIdxUnsignedByte, {2, 27, 28}, Ramp(2 * 27 * 28)));
  Write("train-labels-idx1-ubyte", IdxBytes(kIdxUnsignedByte, {2}, {1, 2}));
  std::string message = IoErrorOf([&] { LoadSplit(dir_.string(), "train"); });
  EXPECT_NE(message.find("shape 2 x 27 x 28; expected N x 28 x 28"), std::string::npos) << message;

  Write("t10k-images-idx3-ubyte", IdxBytes(kIdxUnsignedByte, {2, 28, 28}, Ramp(2 * 784)));
  Write("t10k-labels-idx1-ubyte", IdxBytes(kIdxUnsignedByte, {2}, {4, 10}));
  message = IoErrorOf([&] { LoadSplit(dir_.string(), "t10k"); });
  EXPECT_NE(message.find("label 10 of example 1 is not a class (0..9)"), std::string::npos)
      << message;

  EXPECT_THROW(LoadSplit(dir_.string(), "validation"), tandem::InvalidArgument);
  message = IoErrorOf([&] { LoadSplit((dir_ / "nowhere").string(), "train"); });
  EXPECT_NE(message.find("cannot open"), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(Encodings, IdxFileTest,
                         ::testing::Values(Encoding::kPlain, Encoding::kGzip),
                         [](const auto& param_info) {
                           return param_info.param == Encoding::kPlain ? std::string("Plain")
                                                                       : std::string("Gzip");
                         });

// A gzip stream cut short: the reader reports the file, not a short array.
TEST(IdxFileGzip, TruncatedGzipStream) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("idx_file_test_gz_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string full = (dir / "full.gz").string();
  const std::vector<uint8_t> bytes = IdxBytes(kIdxUnsignedByte, {100, 28, 28}, Ramp(100 * 784));
  gzFile f = gzopen(full.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
  const auto size = std::filesystem::file_size(full);
  const std::string cut = (dir / "cut.gz").string();
  std::filesystem::copy_file(full, cut);
  std::filesystem::resize_file(cut, size / 2);
  const std::string message = IoErrorOf([&] { ReadIdxFile(cut); });
  std::filesystem::remove_all(dir);
  EXPECT_NE(message.find(cut), std::string::npos) << message;
  EXPECT_NE(message.find("gzip"), std::string::npos) << message;
}

// Debian's dataset-fashion-mnist, when installed: 60000 + 10000 examples,
// every class present.
TEST(DebianFashionMnist, BothSplitsLoad) {
  if (!std::filesystem::exists(std::string(kDebianDataDir) + "/t10k-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << kDebianDataDir << ")";
  }
  const Split train = LoadSplit(kDebianDataDir, "train");
  const Split test = LoadSplit(kDebianDataDir, "t10k");
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(test.count, 10000);
  EXPECT_EQ(train.pixels.size(), 60000u * 784u);
  std::vector<int> per_class(kNumClasses, 0);
  for (uint8_t label : test.labels) ++per_class[label];
  for (int c = 0; c < kNumClasses; ++c) EXPECT_EQ(per_class[c], 1000) << "class " << c;
}

}  // namespace
}  // namespace fashion_mnist
