// Compile chain/contracts/*.sol and *.yul with solc-js (WASM) into chain/build/<Contract>.json
// ({abi, bytecode}), or into the directory given as the first argument (the test that the
// committed evm/artifacts.json is current compiles into a temporary one). Deterministic: same
// sources and settings, same bytecode.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const here = path.dirname(fileURLToPath(import.meta.url));
const sourcesDir = path.join(here, "contracts");
const outDir = process.argv[2] ? path.resolve(process.argv[2]) : path.join(here, "build");
const sources = {};
// contracts/bench/ holds what only bench/ deploys (a baseline account, a gas meter); adding
// sources does not change other contracts' bytecode (each one's metadata names its own).
for (const dir of ["", "bench"]) {
  const from = path.join(sourcesDir, dir);
  for (const file of fs.readdirSync(from).filter((f) => f.endsWith(".sol")).sort()) {
    const name = dir ? `contracts/${dir}/${file}` : `contracts/${file}`;
    sources[name] = { content: fs.readFileSync(path.join(from, file), "utf8") };
  }
}
const settings = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "cancun",
  outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
};
function findImports(importPath) {
  try {
    return { contents: fs.readFileSync(path.join(here, "node_modules", importPath), "utf8") };
  } catch {
    return { error: `not found: ${importPath}` };
  }
}
// One solc run: its errors end the script; every contract of our sources becomes
// build/<Contract>.json (a Yul object has no ABI: []).
function compileAndWrite(language, input) {
  const output = JSON.parse(
    solc.compile(JSON.stringify({ language, sources: input, settings }), { import: findImports }),
  );
  const errors = (output.errors || []).filter((e) => e.severity === "error");
  if (errors.length) {
    for (const e of errors) console.error(e.formattedMessage);
    process.exit(1);
  }
  for (const [file, contracts] of Object.entries(output.contracts)) {
    if (!file.startsWith("contracts/")) continue;
    for (const [name, c] of Object.entries(contracts)) {
      const artifact = { contractName: name, abi: c.abi || [], bytecode: "0x" + c.evm.bytecode.object };
      fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(artifact, null, 1));
    }
  }
}
fs.mkdirSync(outDir, { recursive: true });
compileAndWrite("Solidity", sources);
// solc takes one Yul source per compile.
const yulFiles = fs.readdirSync(sourcesDir).filter((f) => f.endsWith(".yul")).sort();
for (const file of yulFiles) {
  const content = fs.readFileSync(path.join(sourcesDir, file), "utf8");
  compileAndWrite("Yul", { [`contracts/${file}`]: { content } });
}
console.log(
  `compiled ${Object.keys(sources).length + yulFiles.length} files with solc ${solc.version()}`,
);
