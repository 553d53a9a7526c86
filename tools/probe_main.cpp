// tools/probe_main.cpp — tessera-probe: the helper program the plugin
// loader starts to open and score backend plugins in a fresh process
// before the host opens the one it picks (src/backend/score_probe.hpp).
// Not meant to be run by hand.
#include "backend/score_probe.hpp"

int main(int argc, char ** argv) { return tessera::detail::probe_helper_main(argc, argv); }
