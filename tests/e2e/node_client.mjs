// The official OpenAI Node SDK against cobatch serve: completions and chat, streaming and not.
// usage: node node_client.mjs URL MODEL   (prints one JSON object with what came back)
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.COBATCH_NODE_MODULES, "x.js"));
const mod = require("openai");
const OpenAI = mod.OpenAI || mod.default || mod;
const [url, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none" });

async function collect(stream, pick) {
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += pick(ch) || "";
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks };
}

const out = {};
const cp = { model, prompt: "The capital of France is", max_tokens: 12, ignore_eos: true };
let r = await client.completions.create(cp);
out.completion = { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage, object: r.object };
out.completion_stream = await collect(
  await client.completions.create({ ...cp, stream: true, stream_options: { include_usage: true } }),
  (ch) => ch.text);
const msgs = [{ role: "system", content: "You are a helpful assistant." },
              { role: "user", content: "What is the capital of France?" }];
r = await client.chat.completions.create({ model, messages: msgs, max_tokens: 40 });
out.chat = { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage, object: r.object,
             role: r.choices[0].message.role };
out.chat_stream = await collect(
  await client.chat.completions.create({ model, messages: msgs, max_tokens: 40, stream: true,
                                         stream_options: { include_usage: true } }),
  (ch) => ch.delta && ch.delta.content);
console.log(JSON.stringify(out));
