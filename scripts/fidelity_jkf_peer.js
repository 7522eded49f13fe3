// The third peer of scripts/fidelity_corpus.py: json-kifu-format (Kifu for JS's parser, npm, MIT).
// Reads one record's text on stdin, its format (kif, ki2, csa) in argv[2]; prints one JSON line:
// {moves, special, preset, initialColor} of the main line (forks excluded), or {error}.
// Run with NODE_PATH naming a folder where `npm install json-kifu-format@5.5.0` was run.
const jkf = require("json-kifu-format");
const fmt = process.argv[2];
const text = require("fs").readFileSync(0, "utf8");
try {
  const P = jkf.JKFPlayer;
  const player = {kif: (t) => P.parseKIF(t), ki2: (t) => P.parseKI2(t), csa: (t) => P.parseCSA(t)}[fmt](text);
  const kifu = player.kifu;
  let moves = 0;
  let special = null;
  for (const m of kifu.moves) {
    if (m.move) moves++;
    if (m.special) special = m.special;
  }
  const initial = kifu.initial || {};
  console.log(JSON.stringify({moves, special, preset: initial.preset || null,
                              initialColor: initial.data ? initial.data.color : null}));
} catch (e) {
  console.log(JSON.stringify({error: String(e).slice(0, 100)}));
}
