// Placeholder until the admin command lands.
export async function main(_argv: string[]): Promise<number> {
  process.stderr.write('capsule admin: not available yet\n');
  return 2;
}
