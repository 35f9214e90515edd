// The text of OpenSSL's per-thread error queue, for error messages.
#pragma once

#include <string>

namespace tandem::net {

/// Pops every error OpenSSL queued on this thread and returns them joined
/// with "; " (oldest first), or "no OpenSSL error queued". Leaves the queue
/// empty, so a later failure never reports an earlier one's cause. Any
/// thread; never throws except std::bad_alloc.
std::string OpenSslErrorText();

/// Empties this thread's OpenSSL error queue (before a call whose failure
/// is then read with OpenSslErrorText). Any thread; never throws.
void ClearOpenSslErrors();

}  // namespace tandem::net
