// Builds the report page template: bundles src/main.js (with Chart.js) and src/style.css with esbuild
// and inlines both into src/index.html, giving one self-contained HTML file. The C++ writer
// (src/report/html_page.cpp) later fills the two JSON placeholders with the report and the kernels'
// source. Usage: node build.mjs [--out PATH]   (default: dist/template.html)
import * as esbuild from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const outIndex = process.argv.indexOf('--out');
const outPath = path.resolve(outIndex >= 0 ? process.argv[outIndex + 1] : path.join(here, 'dist', 'template.html'));

const PLACEHOLDERS = ['@@FLASHBOX_DATA@@', '@@FLASHBOX_SOURCES@@'];

async function bundle(entry, loader) {
  const result = await esbuild.build({
    entryPoints: [path.join(here, 'src', entry)],
    bundle: true,
    minify: true,
    write: false,
    format: 'iife',
    target: ['es2020'],
    legalComments: 'none',
    loader,
    logLevel: 'warning',
  });
  return result.outputFiles[0].text;
}

function fail(message) {
  console.error(`web build: ${message}`);
  process.exit(1);
}

const js = await bundle('main.js');
const css = await bundle('style.css', { '.css': 'css' });
// Inline code must not end its own element early or contain the writer's placeholders.
if (/<\/script/i.test(js)) fail('bundled script contains "</script"; cannot inline it');
if (/<\/style/i.test(css)) fail('bundled style contains "</style"; cannot inline it');
for (const p of PLACEHOLDERS) {
  if (js.includes(p) || css.includes(p)) fail(`bundle contains the placeholder ${p}`);
}

let html = fs.readFileSync(path.join(here, 'src', 'index.html'), 'utf8');
const slots = { '<!--@STYLE@-->': `<style>${css}</style>`, '<!--@SCRIPT@-->': `<script>${js}</script>` };
for (const [slot, content] of Object.entries(slots)) {
  const parts = html.split(slot);
  if (parts.length !== 2) fail(`src/index.html must contain ${slot} exactly once`);
  html = parts[0] + content + parts[1];  // no String.replace: "$" in the bundle must stay literal
}
for (const p of PLACEHOLDERS) {
  if (html.split(p).length !== 2) fail(`template must contain ${p} exactly once`);
}
fs.mkdirSync(path.dirname(outPath), { recursive: true });
fs.writeFileSync(outPath, html);
console.log(`web build: wrote ${outPath} (${(html.length / 1024).toFixed(0)} KiB)`);
