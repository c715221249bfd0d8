// The Gloo entry points of a loom built without Gloo (LOOM_GLOO=OFF, or libgloo-dev not found).
#include <cstdlib>

#include "loom/comm/gloo.hpp"
#include "loom/core/error.hpp"

namespace loom::comm {

GlooOptions gloo_options_from_environment(bool) { return {}; }

std::unique_ptr<Communicator> make_gloo_communicator(int, int, const BlobExchange&, const GlooOptions&,
                                                     const CommOptions&) {
  fail(ErrorCategory::invalid_argument,
       "Gloo communicator: this loom was built without Gloo (install libgloo-dev, e.g. with scripts/install-deps.sh, "
       "and rebuild with LOOM_GLOO=AUTO or ON)");
}

bool gloo_built() { return false; }

}  // namespace loom::comm
