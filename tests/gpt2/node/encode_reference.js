// Prints the token ids Encoder.js (npm gpt-3-encoder, the reference) gives each string of a JSON
// array file: one JSON array of id arrays on stdout. Used by tests/gpt2/tokenizer_test.cpp.
'use strict';
const fs = require('fs');
const path = require('path');
const { encode } = require(path.join(__dirname, 'node_modules', 'gpt-3-encoder'));
const texts = JSON.parse(fs.readFileSync(process.argv[2], 'utf-8'));
process.stdout.write(JSON.stringify(texts.map(t => encode(t))));
