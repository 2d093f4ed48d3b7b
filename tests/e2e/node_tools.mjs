// The official OpenAI Node SDK's streaming helper against cobatch serve: a streamed, forced tool
// call collected by the SDK itself (ChatCompletionStream checks the delta format: index, id, name
// once, arguments in pieces).
// usage: node node_tools.mjs URL MODEL   (prints one JSON object with what came back)
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.COBATCH_NODE_MODULES, "x.js"));
const mod = require("openai");
const OpenAI = mod.OpenAI || mod.default || mod;
const [url, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none" });

const tools = [{ type: "function", function: { name: "get_weather", description: "Current weather of a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 } }, required: ["city"] } } }];
const stream = client.chat.completions.stream({
  model, max_tokens: 60, tools, tool_choice: "required", parallel_tool_calls: false,
  messages: [{ role: "system", content: "You are a helpful assistant." },
             { role: "user", content: "What is the weather in Paris?" }] });
let pieces = 0;
stream.on("tool_calls.function.arguments.delta", () => { pieces++; });
const done = [];
stream.on("tool_calls.function.arguments.done", (e) => { done.push({ name: e.name, arguments: e.arguments }); });
const final = await stream.finalChatCompletion();
const c = final.choices[0];
console.log(JSON.stringify({ finish: c.finish_reason, content: c.message.content, tool_calls: c.message.tool_calls,
                             pieces, done }));
