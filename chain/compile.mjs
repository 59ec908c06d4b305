// Compile chain/contracts/*.sol and *.yul with solc-js (WASM) into chain/build/<Contract>.json
// ({abi, bytecode}). Deterministic: same sources and settings, same bytecode.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const here = path.dirname(fileURLToPath(import.meta.url));
const sourcesDir = path.join(here, "contracts");
const outDir = path.join(here, "build");
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
const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
function findImports(importPath) {
  try {
    return { contents: fs.readFileSync(path.join(here, "node_modules", importPath), "utf8") };
  } catch {
    return { error: `not found: ${importPath}` };
  }
}
const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (output.errors || []).filter((e) => e.severity === "error");
if (errors.length) {
  for (const e of errors) console.error(e.formattedMessage);
  process.exit(1);
}
fs.mkdirSync(outDir, { recursive: true });
for (const [file, contracts] of Object.entries(output.contracts)) {
  if (!file.startsWith("contracts/")) continue;
  for (const [name, c] of Object.entries(contracts)) {
    fs.writeFileSync(
      path.join(outDir, `${name}.json`),
      JSON.stringify({ contractName: name, abi: c.abi, bytecode: "0x" + c.evm.bytecode.object }, null, 1),
    );
  }
}
// A Yul object (no ABI): solc takes one Yul source per compile.
const yulFiles = fs.readdirSync(sourcesDir).filter((f) => f.endsWith(".yul")).sort();
for (const file of yulFiles) {
  const name = `contracts/${file}`;
  const yul = JSON.parse(
    solc.compile(
      JSON.stringify({
        language: "Yul",
        sources: { [name]: { content: fs.readFileSync(path.join(sourcesDir, file), "utf8") } },
        settings: {
          optimizer: { enabled: true, runs: 200 },
          evmVersion: "cancun",
          outputSelection: { "*": { "*": ["evm.bytecode.object"] } },
        },
      }),
    ),
  );
  const yulErrors = (yul.errors || []).filter((e) => e.severity === "error");
  if (yulErrors.length) {
    for (const e of yulErrors) console.error(e.formattedMessage);
    process.exit(1);
  }
  for (const [objectName, c] of Object.entries(yul.contracts[name])) {
    fs.writeFileSync(
      path.join(outDir, `${objectName}.json`),
      JSON.stringify({ contractName: objectName, abi: [], bytecode: "0x" + c.evm.bytecode.object }, null, 1),
    );
  }
}
console.log(
  `compiled ${Object.keys(sources).length + yulFiles.length} files with solc ${solc.version()}`,
);
