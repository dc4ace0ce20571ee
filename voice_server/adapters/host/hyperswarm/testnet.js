#!/usr/bin/env node
// A local HyperDHT testnet on 127.0.0.1 for tests: prints {"bootstrap": "127.0.0.1:PORT,..."}
// and runs until stdin closes or a signal arrives. Nothing leaves the machine.
'use strict'

const createTestnet = require('hyperdht/testnet')

async function main () {
  const size = Number(process.argv[2] || 3)
  const testnet = await createTestnet(size, { host: '127.0.0.1' })
  const bootstrap = testnet.bootstrap.map((b) => `${b.host}:${b.port}`).join(',')
  process.stdout.write(JSON.stringify({ bootstrap }) + '\n')
  let closing = false
  const stop = async () => {
    if (closing) return
    closing = true
    await testnet.destroy()
    process.exit(0)
  }
  process.stdin.on('end', stop)
  process.stdin.resume()
  for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, stop)
}

main().catch((err) => { process.stderr.write(String(err && err.stack) + '\n'); process.exit(1) })
