// tests/llm/perplexity_text.hpp — a short children's story written for the
// perplexity tests (stories260K was trained on stories of this kind), and
// llama.cpp's perplexity figures on it: the reference the tests compare
// with. The text is this project's own.
#pragma once

namespace tessera::test {

// 2118 bytes, ending in a newline: 979 tokens with stories260K's vocabulary
// (BOS included).
inline constexpr const char * k_story = R"story(Once upon a time, there was a little girl named Lily. She lived in a small house near a big green park. Every day, Lily went to the park with her mom to play on the swings and look at the ducks in the pond.
One sunny morning, Lily saw a small brown dog sitting under a tree. The dog looked sad and hungry. Lily wanted to help the dog, so she asked her mom if she could give it some of her bread. Her mom smiled and said yes.
Lily walked slowly to the dog and held out the bread. The dog sniffed it and then ate it all up. It wagged its tail and licked Lily's hand. Lily laughed and said, "You are a good dog! I will call you Max."
Max followed Lily and her mom all around the park. They played with a red ball and ran on the soft grass. When it was time to go home, Max did not want to stay alone. Lily was sad too.
Her mom thought for a moment. Then she said, "Max can come home with us, but you must take care of him every day." Lily was so happy. She hugged her mom and said, "Thank you! I will feed him and give him water and play with him."
From that day on, Lily and Max were best friends. They went to the park together, and Max always sat next to Lily when she looked at the ducks. Lily learned that being kind to others can make new friends.
The next week, it started to rain. Lily and Max could not go to the park. Lily felt bored. She looked out the window and saw the big puddles on the street. Max looked at her and barked. He wanted to play.
Lily had an idea. She found a box of old toys and built a little house for Max with a blanket and two chairs. Max ran inside the house and lay down. Lily sat next to him and read him a story about a brave cat who climbed a tall tree.
When the rain stopped, the sun came out and a big rainbow was in the sky. Lily and Max ran outside. They jumped in the puddles and got very wet and very muddy. Mom laughed when she saw them and gave them both a warm bath.
That night, Lily was tired but happy. She gave Max a kiss on his head and said good night. Max curled up at the end of her bed, and they both fell asleep and dreamed of the park, the ducks and the rainbow.
)story";

// llama-perplexity (llama.cpp de3ff81, CPU, built here) on k_story saved
// as a file: `llama-perplexity -m stories260K.gguf -f story.txt -c C -b 256
// -t 1 -fa off -ctk f32 -ctv f32` (its closest-to-F32 settings), and
// `-m llama-2-tiny-random.gguf -c 128` (defaults: flash attention, F16 KV
// cache; it also takes the products' activations in F16 for F16 weights).
struct perplexity_reference {
    const char * model;
    int n_ctx;
    double ppl;
    double ppl_stderr;
};
inline constexpr perplexity_reference k_story_references[] = {
    {"stories260K.gguf", 128, 3.8197, 0.29515},
    {"stories260K.gguf", 256, 3.7511, 0.30811},
    {"llama-2-tiny-random.gguf", 128, 32100.0432, 120.69945},
};
// stories260K quantized by `tessera quantize` (the bytes llm::quantize_file
// writes; the same files read by both), -c 128, the reference's F32 settings
// as above. The two differ in the activations' rounding (both quantize them
// to 8-bit blocks, in different block sizes and orders), by 0.02-0.2%.
struct quantized_reference {
    const char * type; // parse_file_type's name
    double ppl;
};
inline constexpr quantized_reference k_story_quantized_128[] = {
    {"Q8_0", 3.8138},
    {"Q4_0", 4.0921},
    {"Q4_K_M", 3.8950},
};
// Its running estimates after each chunk, stories260K, -c 128, as above.
inline constexpr double k_story_running_128[] = {3.2633, 3.3968, 3.1501, 3.1994, 3.2705, 3.4992, 3.8197};

} // namespace tessera::test
