// llama-server's `--jinja` prompt path as a command, for tests/export/test_gguf_chat_template.py:
// llama.cpp reads the chat template from the GGUF itself (common_chat_templates_init with no
// override, as llama-server does), parses the OpenAI request's messages and tools with its own
// parsers and renders them with common_chat_templates_apply — llama.cpp's C++ jinja engine
// (common/jinja), its template workarounds and per-format handlers included.
// usage: render MODEL.gguf < {"messages": [...], "tools": [...], "add_generation_prompt": true,
//                             "chat_template_kwargs": {...}}
#include "chat.h"
#include "llama.h"

#include <iostream>
#include <iterator>

int main(int argc, char ** argv) {
    if (argc != 2) {
        std::cerr << "usage: render MODEL.gguf < request.json\n";
        return 2;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    auto mp       = llama_model_default_params();
    mp.vocab_only = true;  // the template and the vocabulary (BOS/EOS) are all a prompt needs
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::cerr << "cannot load " << argv[1] << "\n";
        return 1;
    }
    std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    try {
        auto body  = common_json::parse(in);
        auto tmpls = common_chat_templates_init(model, "");
        common_chat_templates_inputs inputs;
        inputs.messages = common_chat_msgs_parse_oaicompat(body.at("messages"));
        if (body.contains("tools")) {
            inputs.tools = common_chat_tools_parse_oaicompat(body.at("tools"));
        }
        if (body.contains("chat_template_kwargs")) {  // as the server takes them per request
            for (const auto & [key, val] : body.at("chat_template_kwargs").items()) {
                inputs.chat_template_kwargs[key] = val.dump();
            }
        }
        inputs.add_generation_prompt = body.value<bool>("add_generation_prompt", true);
        inputs.use_jinja             = true;
        std::cout << common_chat_templates_apply(tmpls.get(), inputs).prompt;
    } catch (const std::exception & e) {
        std::cerr << e.what() << "\n";
        return 1;
    }
    llama_model_free(model);
    return 0;
}
