// The main job's model: a small CNN for 28x28 greyscale images, two
// convolutions and two fully connected layers:
//
//   conv 5x5, 1->16, pad 2 -> ReLU -> max-pool 2   (16 x 14 x 14)
//   conv 5x5, 16->32, pad 2 -> ReLU -> max-pool 2  (32 x 7 x 7)
//   fc 1568->128 -> ReLU -> fc 128->10             (logits)
//
// About 0.2 M parameters in 8 tensors. No dropout or batch norm: every
// worker's forward pass depends on its weights and batch only, which the
// equivalence test relies on.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace fashion_mnist {

/// The CNN. Its parameters, in registration order, are the exchange's
/// parameters 0..7 (conv1 weight/bias, conv2, fc1, fc2).
///
/// Thread-safety: as a torch::nn::Module (one training thread).
class CnnModelImpl : public torch::nn::Module {
 public:
  /// Initialises with LibTorch's defaults from its global generator: seed it
  /// (torch::manual_seed) first for reproducible weights.
  CnnModelImpl();
  /// `images` [N, 1, 28, 28] float -> logits [N, 10].
  torch::Tensor forward(torch::Tensor images);

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::Conv2d conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
};
TORCH_MODULE(CnnModel);

}  // namespace fashion_mnist
