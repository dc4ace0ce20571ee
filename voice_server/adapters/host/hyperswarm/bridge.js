#!/usr/bin/env node
// Hyperswarm bridge for the voice_server NDJSON host (specs/sidecar-host-ndjson.md, "Purpose":
// Host and Client talk over Hyperswarm). It only moves bytes; the protocol lives in Python.
//
//   bridge.js keygen                                  print a new Server ID (base58 of 32 bytes)
//   bridge.js serve   --key K (--tcp H:P | --unix PATH) [--bootstrap H:P,...] [--bind H] [--direct]
//       announce the topic as a server; pipe every peer connection to the host
//   bridge.js connect --key K [--bootstrap H:P,...] [--bind H] [--direct] [--timeout S]
//       find the host on the topic; pipe stdin/stdout to the first peer connection
//
// The topic is the Server ID decoded from base58 when it is 32 bytes (the original's pairing),
// otherwise SHA-256 of the key text. Status lines are JSON on stdout (serve) or stderr
// (connect, whose stdout carries the protocol). With --bootstrap the DHT node binds to --bind
// (default 127.0.0.1) and --direct declares it reachable without holepunching (needed for
// reliable connections on a loopback testnet).
'use strict'

const crypto = require('crypto')
const net = require('net')
const Hyperswarm = require('hyperswarm')
const HyperDHT = require('hyperdht')
const bs58 = require('bs58').default || require('bs58')

function parseArgs (argv) {
  const args = { _: [] }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--direct') args.direct = true
    else if (a.startsWith('--')) args[a.slice(2)] = argv[++i]
    else args._.push(a)
  }
  return args
}

function topicFor (key) {
  try {
    const raw = Buffer.from(bs58.decode(key))
    if (raw.length === 32) return raw
  } catch {}
  return crypto.createHash('sha256').update(key, 'utf8').digest()
}

function parseBootstrap (text) {
  if (!text) return null
  return text.split(',').filter(Boolean).map((hp) => {
    const i = hp.lastIndexOf(':')
    return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) }
  })
}

function makeSwarm (args) {
  const bootstrap = parseBootstrap(args.bootstrap)
  if (!bootstrap) return new Hyperswarm()
  // --direct: this node is reachable without holepunching (a loopback testnet, a public host)
  const dht = new HyperDHT({ bootstrap, host: args.bind || '127.0.0.1', firewalled: !args.direct })
  return new Hyperswarm({ dht })
}

function status (stream, obj) {
  stream.write(JSON.stringify(obj) + '\n')
}

function onSignals (fn) {
  for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, fn)
}

async function serve (args) {
  if (!args.key || !(args.tcp || args.unix)) throw new Error('serve needs --key and --tcp or --unix')
  const topic = topicFor(args.key)
  const target = args.unix
    ? { path: args.unix }
    : { host: args.tcp.slice(0, args.tcp.lastIndexOf(':')), port: Number(args.tcp.slice(args.tcp.lastIndexOf(':') + 1)) }
  const swarm = makeSwarm(args)
  let peers = 0
  swarm.on('connection', (conn) => {
    peers++
    const sock = net.connect(target)
    const done = () => { conn.destroy(); sock.destroy() }
    conn.on('error', done)
    sock.on('error', done)
    conn.on('close', done)
    sock.on('close', done)
    conn.pipe(sock)
    sock.pipe(conn)
    status(process.stderr, { event: 'peer', peers, peer: conn.remotePublicKey.toString('hex') })
  })
  const discovery = swarm.join(topic, { server: true, client: false })
  await discovery.flushed()
  status(process.stdout, { ready: true, server_id: bs58.encode(topic), topic: topic.toString('hex'), public_key: swarm.keyPair.publicKey.toString('hex') })
  onSignals(async () => { await swarm.destroy(); process.exit(0) })
}

async function connect (args) {
  if (!args.key) throw new Error('connect needs --key')
  const topic = topicFor(args.key)
  const swarm = makeSwarm(args)
  const timeoutMs = 1000 * Number(args.timeout || 15)
  let active = null
  const shutdown = async (code) => { await swarm.destroy().catch(() => {}); process.exit(code) }
  const timer = setTimeout(() => {
    if (active) return
    status(process.stderr, { code: 'HOST_OFFLINE', message: 'No host found for this Server ID' })
    shutdown(3)
  }, timeoutMs)
  swarm.on('connection', (conn) => {
    if (active) { conn.destroy(); return }
    active = conn
    clearTimeout(timer)
    status(process.stderr, { event: 'connected', peer: conn.remotePublicKey.toString('hex') })
    process.stdin.pipe(conn)
    conn.pipe(process.stdout)
    conn.on('error', () => {})
    conn.on('close', () => {
      status(process.stderr, { code: 'HOST_DISCONNECTED', message: 'Host disconnected' })
      shutdown(0)
    })
  })
  process.stdin.on('end', () => { if (active) active.end(); else shutdown(0) })
  swarm.join(topic, { server: false, client: true })
  onSignals(() => shutdown(0))
}

async function main () {
  const args = parseArgs(process.argv.slice(2))
  const mode = args._[0]
  if (mode === 'keygen') return status(process.stdout, { server_id: bs58.encode(crypto.randomBytes(32)) })
  if (mode === 'serve') return serve(args)
  if (mode === 'connect') return connect(args)
  throw new Error('usage: bridge.js keygen | serve --key K (--tcp H:P | --unix PATH) | connect --key K')
}

main().catch((err) => {
  status(process.stderr, { code: 'CONNECT_FAILED', message: String(err && err.message ? err.message : err) })
  process.exit(2)
})
