// llama_common.cpp — see llama_common.h. C++ stays inside this file: exceptions end here as errors.
#include "llama_common.h"

#include "json-schema-to-grammar.h"
#include "json.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

namespace {

void set_err(char *err, size_t errlen, const char *what, const char *detail) {
    if (!err || errlen == 0) return;
    std::snprintf(err, errlen, "%s%s%s", what, detail && *detail ? ": " : "", detail ? detail : "");
    for (char *c = err; *c; c++) // one line: the converter's messages may span several
        if (*c == '\n' || *c == '\r') *c = ' ';
}

char *dup(const std::string &s) {
    char *c = static_cast<char *>(std::malloc(s.size() + 1));
    if (c) std::memcpy(c, s.c_str(), s.size() + 1);
    return c;
}

} // namespace

extern "C" char *cb_common_schema_to_grammar(const char *schema, char *err, size_t errlen) {
    try {
        common_json j = common_json::parse(schema ? schema : "");
        std::string g = json_schema_to_grammar(j, true);
        char *c = dup(g);
        if (!c) set_err(err, errlen, "out of memory", nullptr);
        return c;
    } catch (const std::bad_alloc &) {
        set_err(err, errlen, "out of memory", nullptr);
    } catch (const common_json_error &e) {
        set_err(err, errlen, "the schema is not JSON", e.what());
    } catch (const std::exception &e) {
        set_err(err, errlen, "the schema cannot be turned into a grammar", e.what());
    } catch (...) {
        set_err(err, errlen, "the schema cannot be turned into a grammar", nullptr);
    }
    return nullptr;
}
