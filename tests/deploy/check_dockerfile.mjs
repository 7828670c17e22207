// Checks a Dockerfile without Docker: its syntax (dockerfile-utils' validator, the linter behind the
// Docker language server) and what this project's image must hold to (each function below is one rule).
// Exit 1 on a problem, naming the line.
//   node tests/deploy/check_dockerfile.mjs --context DIR --uid N DOCKERFILE
// MOE_DOCKERFILE_NODE_MODULES: where dockerfile-utils (and its dockerfile-ast) is installed
// (tests/deploy/dockerfile_test.sh installs a pinned version).
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

function parseArgs(argv) {
  const a = { context: '.', uid: null, file: null };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--context') a.context = argv[++i];
    else if (argv[i] === '--uid') a.uid = argv[++i];
    else if (argv[i].startsWith('--')) throw new Error(`unknown option ${argv[i]}`);
    else a.file = argv[i];
  }
  if (!a.file || a.uid === null) throw new Error('usage: check_dockerfile.mjs --context DIR --uid N DOCKERFILE');
  return a;
}

function loadLinters() {
  const dir = process.env.MOE_DOCKERFILE_NODE_MODULES;
  if (!dir || !existsSync(join(dir, 'dockerfile-utils'))) {
    console.error(`FAIL: MOE_DOCKERFILE_NODE_MODULES (${dir}) has no dockerfile-utils: run tests/deploy/dockerfile_test.sh`);
    process.exit(2);
  }
  const require = createRequire(join(dir, 'noop.js'));
  return { utils: require('dockerfile-utils'), ast: require('dockerfile-ast') };
}

const lineOf = (instr) => instr.getRange().start.line + 1;
const words = (instr) => instr.getArguments().map((a) => a.getValue());

// Syntax and semantics as the Docker language server reads them (unknown instructions, bad flags,
// malformed ARG/ENV/HEALTHCHECK, ...): every diagnostic is a problem.
function checkSyntax(utils, text, out) {
  for (const d of utils.validate(text, {})) out.push(`line ${d.range.start.line + 1}: ${d.message}`);
}

// ARG defaults declared before the first FROM: what ${VAR} in a FROM line means when nobody passes
// --build-arg. A FROM whose variable has no default has no pinned image.
function globalArgs(df) {
  const args = new Map();
  for (const a of df.getInitialARGs()) {
    for (const p of a.getProperties()) args.set(p.getName(), p.getValue() ?? '');
  }
  return args;
}
function expand(s, args, where, out) {
  return s.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (_, a, b) => {
    const v = args.get(a ?? b);
    if (!v) out.push(`${where}: \${${a ?? b}} has no default (an ARG before the first FROM): the base image is not pinned`);
    return v ?? '';
  });
}

// Base images: an earlier stage, or an image pinned by tag (not latest) or digest.
function checkBaseImages(df, out) {
  const args = globalArgs(df);
  const stages = new Set();
  for (const from of df.getFROMs()) {
    const where = `line ${lineOf(from)} FROM`;
    const image = expand(from.getImage() ?? '', args, where, out);
    if (stages.has(image)) { addStage(from, stages); continue; }
    const digest = image.includes('@sha256:');
    const tag = /:([^/:@]+)$/.exec(image.split('@')[0])?.[1];
    if (!digest && !tag) out.push(`${where} ${image}: no tag or digest (that is :latest, whatever it is today)`);
    if (tag === 'latest') out.push(`${where} ${image}: the latest tag is not a pinned image`);
    addStage(from, stages);
  }
  return stages;
}
function addStage(from, stages) {
  const name = from.getBuildStage();
  if (name) stages.add(name);
}

// .dockerignore, as Docker reads it (Go filepath.Match per path segment, ** for any segments, a
// trailing / ignored, ! re-includes): a path is excluded when the last matching pattern excludes it.
function dockerignore(context) {
  const file = join(context, '.dockerignore');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#')).map((l) => {
    const keep = l.startsWith('!');
    const pat = (keep ? l.slice(1) : l).replace(/^\/+|\/+$/g, '');
    const re = pat.split('/').map((seg) => (seg === '**' ? '.*' : seg.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]'))).join('/');
    return { keep, re: new RegExp(`^${re.replace(/\.\*\//g, '(.*/)?')}(/.*)?$`) };
  });
}
function ignored(rules, path) {
  let out = false;
  for (const r of rules) if (r.re.test(path)) out = !r.keep;
  return out;
}

// COPY/ADD from the build context: every source exists in the repository and is not excluded by
// .dockerignore; --from names an earlier stage; ADD is not used for URLs (no pinned content).
function checkCopySources(df, context, stages, out) {
  const rules = dockerignore(context);
  for (const instr of df.getInstructions()) {
    const kw = instr.getKeyword();
    if (kw !== 'COPY' && kw !== 'ADD') continue;
    const where = `line ${lineOf(instr)} ${kw}`;
    const from = instr.getFromFlag?.()?.getValue();
    const srcs = words(instr).filter((w) => !w.startsWith('--')).slice(0, -1);
    if (from) {
      if (!stages.has(from)) out.push(`${where} --from=${from}: no earlier stage of that name`);
      continue;
    }
    for (const s of srcs) {
      if (/^[a-z]+:\/\//.test(s)) { out.push(`${where} ${s}: a URL (unpinned content); download in a RUN with a checksum`); continue; }
      const rel = s.replace(/^\.\/?/, '') || '.';
      if (!existsSync(join(context, rel))) out.push(`${where} ${s}: no such file in the build context (${context})`);
      else if (rel !== '.' && ignored(rules, rel)) out.push(`${where} ${s}: excluded by .dockerignore`);
    }
  }
  return rules;
}

// The build context must not carry the build trees (COPY . . would send gigabytes and stale objects).
function checkContextExcludes(rules, out) {
  for (const p of ['build', 'build-asan', '.git']) if (!ignored(rules, p)) out.push(`.dockerignore does not keep ${p}/ out of the build context`);
}

// The runtime stage runs as the manifests' non-root uid, numeric (runAsNonRoot can verify only a number).
function checkFinalUser(df, uid, out) {
  const froms = df.getFROMs();
  const last = froms[froms.length - 1];
  const users = df.getInstructions().filter((i) => i.getKeyword() === 'USER' && lineOf(i) > lineOf(last));
  if (!users.length) { out.push('the final stage has no USER: it runs as root'); return; }
  const u = words(users[users.length - 1])[0] ?? '';
  const [user] = u.split(':');
  if (!/^[0-9]+$/.test(user)) out.push(`line ${lineOf(users[users.length - 1])} USER ${u}: not numeric (Kubernetes runAsNonRoot cannot check a name)`);
  else if (user === '0') out.push(`line ${lineOf(users[users.length - 1])} USER ${u}: root`);
  else if (user !== String(uid)) out.push(`line ${lineOf(users[users.length - 1])} USER ${u}: not the manifests' runAsUser ${uid}`);
}

// A health check stated: HEALTHCHECK CMD, or HEALTHCHECK NONE (the manifests' probes instead).
function checkHealthcheck(df, out) {
  if (!df.getInstructions().some((i) => i.getKeyword() === 'HEALTHCHECK'))
    out.push('no HEALTHCHECK: give one, or HEALTHCHECK NONE with a comment naming the probes that check the image');
}

// apt: update and install in one RUN (a cached update goes stale), no recommends, -y, lists removed.
const aptCommands = (cmd) => cmd.split(/&&|;|\|\|/).map((c) => c.trim()).filter((c) => /^apt-get\s/.test(c));
const aptVerb = (c) => c.split(/\s+/).slice(1).find((w) => !w.startsWith('-'));
function checkApt(df, out) {
  for (const run of df.getInstructions().filter((i) => i.getKeyword() === 'RUN')) {
    const cmd = run.getArgumentsContent() ?? '';
    const apt = aptCommands(cmd);
    const install = apt.findIndex((c) => aptVerb(c) === 'install');
    if (install < 0) continue;
    const where = `line ${lineOf(run)} RUN`;
    if (!apt.slice(0, install).some((c) => aptVerb(c) === 'update')) out.push(`${where}: apt-get install without apt-get update before it in the same RUN`);
    const flags = apt[install].split(/\s+/).filter((w) => w.startsWith('-'));
    if (!flags.includes('--no-install-recommends')) out.push(`${where}: apt-get install without --no-install-recommends`);
    if (!flags.some((f) => f === '--yes' || /^-[a-z]*y[a-z]*$/.test(f))) out.push(`${where}: apt-get install without -y`);
    const clean = cmd.search(/rm\s+-rf\s+\/var\/lib\/apt\/lists\/\*/);
    if (clean < cmd.indexOf(apt[install])) out.push(`${where}: the apt lists are not removed after the install (rm -rf /var/lib/apt/lists/*)`);
  }
}

function main() {
  let args;
  try { args = parseArgs(process.argv.slice(2)); } catch (e) { console.error(`FAIL: ${e.message}`); process.exit(2); }
  const { utils, ast } = loadLinters();
  const text = readFileSync(args.file, 'utf8');
  const df = ast.DockerfileParser.parse(text);
  const out = [];
  checkSyntax(utils, text, out);
  const stages = checkBaseImages(df, out);
  const rules = checkCopySources(df, args.context, stages, out);
  checkContextExcludes(rules, out);
  checkFinalUser(df, args.uid, out);
  checkHealthcheck(df, out);
  checkApt(df, out);
  for (const e of out) console.error(`FAIL: ${args.file}: ${e}`);
  console.log(`${args.file}: ${df.getFROMs().length} stages, ${df.getInstructions().length} instructions, ${out.length} problems`);
  process.exit(out.length ? 1 : 0);
}

main();
