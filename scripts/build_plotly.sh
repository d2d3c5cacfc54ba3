#!/bin/sh
# Rebuild src/gpuscope/render/vendor/plotly-gpuscope.min.js.gz: plotly.js's core (scatter) with
# the two other trace types the reports draw (bar, heatmap), nothing else. Needs node and npm
# (it fetches plotly.js and esbuild from npm into a scratch folder).
#
#   scripts/build_plotly.sh [VERSION]      # VERSION: plotly.js's, default 4.1.1
#
# Keep VERSION the one the installed `plotly` Python package writes figures for
# (`python -c "import plotly.offline as o; print(o.get_plotlyjs()[:80])"` names it).
set -eu
version="${1:-4.1.1}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/src/gpuscope/render/vendor/plotly-gpuscope.min.js.gz"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm init -y >/dev/null
npm install --no-audit --no-fund --ignore-scripts "plotly.js@$version" esbuild@0.25 >/dev/null
cat > entry.js <<'JS'
var Plotly = require('plotly.js/lib/core');
Plotly.register([require('plotly.js/lib/bar'), require('plotly.js/lib/heatmap')]);
module.exports = Plotly;
JS
# As plotly.js's own esbuild-config.js, less the plugins for WebGL shaders and CSS: the one
# stylesheet (MapLibre's, for map traces) is left out, as the map traces are.
./node_modules/.bin/esbuild entry.js --bundle --minify --format=iife --global-name=Plotly \
  --target=es2016 --define:global=window --define:define.amd=false \
  --define:process.env.NODE_DEBUG=false --alias:regl=@plotly/regl \
  --alias:stream=stream-browserify --loader:.css=empty --legal-comments=none \
  --log-level=warning --outfile=plotly.min.js
{
  printf '/**\n* plotly.js (gpuscope: core, bar, heatmap - minified) v%s\n' "$version"
  printf '* Copyright 2012-2026, Plotly, Inc.\n* All rights reserved.\n'
  printf '* Licensed under the MIT license\n*/\n'
  cat plotly.min.js
} > plotly-gpuscope.min.js
gzip -9 -n -c plotly-gpuscope.min.js > "$out"
echo "wrote $out ($(wc -c < plotly-gpuscope.min.js) bytes, $(wc -c < "$out") gzip-compressed)"
