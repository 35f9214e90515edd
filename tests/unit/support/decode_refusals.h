// Checks that a message's decoder refuses altered copies of a good message,
// each with a ProtocolError whose text names what is wrong.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem::testing {

/// One alteration of a good message and the words its refusal must hold.
template <typename Message>
struct BadMessage {
  const char* what;
  std::function<void(Message&)> change;
  const char* error;
};

/// For each of `bad`: alters a copy of `good`, encodes it, and expects
/// Message::Decode to throw ProtocolError containing its `error`.
template <typename Message>
void ExpectDecodeRefuses(const Message& good, const std::vector<BadMessage<Message>>& bad) {
  for (const auto& b : bad) {
    Message x = good;
    b.change(x);
    try {
      Message::Decode(x.Encode());
      ADD_FAILURE() << b.what << ": decoded";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(b.error), std::string::npos)
          << b.what << ": " << e.what();
    }
  }
}

}  // namespace tandem::testing
