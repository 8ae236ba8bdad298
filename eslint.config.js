// Lint rules: typescript-eslint's recommended set, without type information
// (fast enough for every CI run). Formatting is prettier's job.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'data/**', '**/node_modules/**', 'clients/*/dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
    },
  },
  {
    // The browser verifier page's own script runs in browsers.
    files: ['control-plane/http/verify-page/**/*.js'],
    languageOptions: { globals: { ...globals.browser } },
  },
  {
    // CommonJS workload scripts that run inside capsules.
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // Tests mutate arbitrary proof JSON to tamper with it.
    files: ['test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
);
