#include "progress_line.h"

#include <fmt/format.h>
#include <unistd.h>

namespace fashion_mnist {

ProgressLine::ProgressLine(FILE* out, int epoch, int epochs, int64_t steps, int64_t global_batch)
    : out_(out),
      tty_(out != nullptr && ::isatty(::fileno(out)) != 0),
      epoch_(epoch),
      epochs_(epochs),
      steps_(steps),
      global_batch_(global_batch) {}

double ProgressLine::samples_per_second() const {
  return step_seconds_ > 0 ? static_cast<double>(steps_done_ * global_batch_) / step_seconds_ : 0;
}

std::string ProgressLine::Render(int64_t step) const {
  constexpr int kWidth = 20;
  const int filled = steps_ > 0 ? static_cast<int>(kWidth * step / steps_) : kWidth;
  return fmt::format(
      "epoch {}/{} [{}{}] {:3}% step {}/{} loss {:.4f} {:.0f} samples/s comm {:.0f}%", epoch_,
      epochs_, std::string(static_cast<size_t>(filled), '#'),
      std::string(static_cast<size_t>(kWidth - filled), ' '),
      steps_ > 0 ? 100 * step / steps_ : 100, step, steps_, mean_loss(), samples_per_second(),
      100 * comm_share());
}

void ProgressLine::Update(int64_t step, double loss, double step_seconds, double comm_seconds) {
  ++steps_done_;
  loss_sum_ += loss;
  step_seconds_ += step_seconds;
  comm_seconds_ += comm_seconds;
  if (out_ == nullptr) return;
  if (tty_) {
    fmt::print(out_, "\r{}{}", Render(step), step == steps_ ? "\n" : "");
    std::fflush(out_);
    return;
  }
  if (steps_ > 0 && step * 10 >= next_tenth_ * steps_) {
    while (step * 10 >= next_tenth_ * steps_) ++next_tenth_;
    fmt::print(out_, "{}\n", Render(step));
    std::fflush(out_);
  }
}

}  // namespace fashion_mnist
