// Policy data read from files at start (adapter): the regulatory mapping and
// the service-published reference Capsulefiles.
export { loadRegulatoryMapping } from './regulatory-mapping.js';
export { readSystemCapsulefiles, type SystemSource } from './system-capsulefiles.js';
