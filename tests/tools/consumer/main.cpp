// consumer MODEL PROMPT N: the prompt and N greedy tokens after it, as
// `tessera run -m MODEL -p PROMPT -n N --temp 0` prints them; through the
// installed tessera::llm API only (model, tokenizer, session, argmax),
// with the CPU plugins loaded from the package's tessera_PLUGIN_DIR.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>

#include <tessera/backend/registry.hpp>
#include <tessera/llm/model.hpp>
#include <tessera/llm/sampler.hpp>
#include <tessera/llm/session.hpp>
#include <tessera/llm/tokenizer.hpp>

int main(int argc, char ** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: consumer MODEL PROMPT N\n");
        return 64;
    }
    namespace llm = tessera::llm;
    try {
        tessera::registry::global().load_all(CONSUMER_PLUGIN_DIR);
        const auto m = llm::model::load(argv[1]);
        const llm::tokenizer tok = llm::tokenizer::from_gguf(m->file());
        llm::session_params p;
        p.n_threads = 1;
        llm::session s(*m, p);
        std::string out = argv[2];
        std::span<const float> logits = s.decode(tok.encode(argv[2], true, true));
        llm::stream_decoder text(tok);
        for (int i = 0; i < std::atoi(argv[3]); ++i) {
            const llm::token_id id = llm::argmax(logits);
            out += text.push(id);
            logits = s.decode(std::span<const llm::token_id>(&id, 1));
        }
        out += text.finish();
        std::fputs(out.c_str(), stdout);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "consumer: %s\n", e.what());
        return 1;
    }
    return 0;
}
