// The example policy files reviewers read must be valid input.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { parse } from 'yaml';
import { checkDeclarationEntry, checkMcpPolicy, checkRule } from '../../egress-proxy/index.js';
import { toolAllowed } from '../../egress-proxy/mcp-policy.js';

const load = (name: string) => parse(readFileSync(new URL(`../../../policies/${name}`, import.meta.url), 'utf8'));

t.test('egress-profile.example.yaml: every rule validates', async (t) => {
  const doc = load('egress-profile.example.yaml');
  t.ok(doc.rules.length > 0);
  for (const r of doc.rules) t.ok(checkRule(r).ok, JSON.stringify(r));
});

t.test('egress-declaration.example.yaml: every entry validates', async (t) => {
  const doc = load('egress-declaration.example.yaml');
  doc.egress_declaration.forEach((e: string, i: number) => t.ok(checkDeclarationEntry(e, i).ok, e));
});

t.test('mcp-policy.example.yaml: validates and behaves as its comments say', async (t) => {
  const m = checkMcpPolicy(load('mcp-policy.example.yaml').mcp_policy);
  t.ok(m.ok);
  if (!m.ok) return;
  t.ok(toolAllowed(m.value, 'search_papers'));
  t.notOk(toolAllowed(m.value, 'export_library'), 'blocklist wins');
  t.notOk(toolAllowed(m.value, 'send_email'));
  t.notOk(toolAllowed(m.value, 'unlisted_tool'), 'whitelist');
});
