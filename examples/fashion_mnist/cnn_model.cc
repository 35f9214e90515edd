#include "cnn_model.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

namespace fashion_mnist {

namespace F = torch::nn::functional;

CnnModelImpl::CnnModelImpl()
    : conv1_(register_module("conv1",
                             torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).padding(2)))),
      conv2_(register_module("conv2",
                             torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).padding(2)))),
      fc1_(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128))),
      fc2_(register_module("fc2", torch::nn::Linear(128, 10))) {}

torch::Tensor CnnModelImpl::forward(torch::Tensor x) {
  x = F::max_pool2d(torch::relu(conv1_->forward(x)), F::MaxPool2dFuncOptions(2));
  x = F::max_pool2d(torch::relu(conv2_->forward(x)), F::MaxPool2dFuncOptions(2));
  x = torch::relu(fc1_->forward(x.flatten(1)));
  return fc2_->forward(x);
}

}  // namespace fashion_mnist
