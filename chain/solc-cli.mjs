// The two native-solc commands crytic-compile (Slither) runs, answered by solc-js (WASM):
// `solc --version` and `solc --standard-json [--allow-paths DIR]` (input on stdin, output on
// stdout). Sources given by "urls" and imports are read from disk, only under the working
// directory or an --allow-paths directory, as native solc does.
import fs from "node:fs";
import path from "node:path";
import solc from "solc";

const args = process.argv.slice(2);
if (args.includes("--version")) {
  console.log(`solc, the solidity compiler commandline interface\nVersion: ${solc.version()}`);
  process.exit(0);
}
if (!args.includes("--standard-json")) {
  console.error("solc-cli.mjs: only --version and --standard-json are supported");
  process.exit(2);
}
const allowed = [process.cwd()];
const at = args.indexOf("--allow-paths");
if (at >= 0 && args[at + 1]) allowed.push(...args[at + 1].split(",").map((p) => path.resolve(p)));

function read(file) {
  const full = path.resolve(file);
  if (!allowed.some((dir) => full === dir || full.startsWith(dir + path.sep))) {
    return { error: `outside the allowed paths: ${file}` };
  }
  try {
    return { contents: fs.readFileSync(full, "utf8") };
  } catch {
    return { error: `not found: ${file}` };
  }
}

const input = JSON.parse(fs.readFileSync(0, "utf8"));
for (const source of Object.values(input.sources || {})) {
  if (source.content !== undefined || !source.urls) continue;
  const found = source.urls.map(read).find((r) => r.contents !== undefined);
  if (found) source.content = found.contents;
}
process.stdout.write(solc.compile(JSON.stringify(input), { import: read }));
