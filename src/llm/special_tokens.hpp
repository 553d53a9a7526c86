// special_tokens.hpp — which tokens end generation, and the token types the
// reference implementation overrides by token text (internal to the llm
// layer). The texts and rules were read off the reference (llama.cpp
// de3ff81, src/llama-vocab.cpp) and checked against its llama_vocab_is_eog
// and tokenization on test vocabularies; see tokenizer.hpp's is_eog.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/llm/tokenizer.hpp"

namespace tessera::llm {

// Ids given by the file's keys (-1: absent).
struct special_ids {
    token_id eos = -1, eot = -1, eom = -1;
    token_id fim_pad = -1, fim_rep = -1, fim_sep = -1;
};

// Returns one flag per token (1: ends generation) and changes `types` where
// the reference does:
//  - a token whose text is an end-of-generation, end-of-turn/message or
//    fill-in-the-middle text becomes a control token;
//  - gpt-oss's <|channel|>, <|message|>, <|start|>, <|constrain|> become
//    user-defined (always matched in text, always printed);
//  - <|end|>, when <|return|> or <|flush|> and <|call|> or <|calls|> also end
//    generation, stops ending it and becomes user-defined; </s>, when
//    <|tool_response> ends generation, stops ending it and becomes normal.
// A fill-in-the-middle role (pad, repository, file separator) without its
// key takes the lowest id with one of its texts (the reference takes the
// first its hash map meets).
std::vector<uint8_t> classify_special_tokens(const std::vector<std::string> & tokens, std::vector<token_type> & types,
                                             special_ids ids);

} // namespace tessera::llm
