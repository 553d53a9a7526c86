#!/usr/bin/env python3
"""Writes damaged copies of an ELF64 little-endian shared library, one per
kind of damage, to check that the plugin loader refuses them (and does not
crash inside dlopen).

    scripts/damage_plugin.py LIB OUTDIR [--only NAME...]

Each copy is written to OUTDIR/<kind>/<basename of LIB>, so that every copy
can be given alone as a TESSERA_BACKEND_PATH folder. Prints the kinds made.
Layouts follow the System V gABI ("ELF Header", "Program Header",
"Dynamic Section"); constants as in <elf.h>.
"""
import os
import random
import struct
import sys

PT_LOAD, PT_DYNAMIC = 1, 2
DT = dict(NULL=0, NEEDED=1, PLTRELSZ=2, HASH=4, STRTAB=5, SYMTAB=6, RELA=7, RELASZ=8,
          STRSZ=10, INIT=12, FINI=13, JMPREL=23, INIT_ARRAY=25, FINI_ARRAY=26,
          INIT_ARRAYSZ=27, GNU_HASH=0x6ffffef5, VERSYM=0x6ffffff0, VERNEED=0x6ffffffe)


class elf:
    def __init__(self, data):
        self.b = bytearray(data)
        (self.phoff, self.shoff) = struct.unpack_from('<QQ', self.b, 0x20)
        (self.phentsize, self.phnum, self.shentsize, self.shnum, self.shstrndx) = \
            struct.unpack_from('<HHHHH', self.b, 0x36)

    def ph(self, i):
        return list(struct.unpack_from('<IIQQQQQQ', self.b, self.phoff + 56 * i))

    def set_ph(self, i, v):
        struct.pack_into('<IIQQQQQQ', self.b, self.phoff + 56 * i, *v)

    def phs(self):
        return [self.ph(i) for i in range(self.phnum)]

    def sections(self):
        out = {}
        if self.shoff == 0:
            return out
        sh = [struct.unpack_from('<IIQQQQIIQQ', self.b, self.shoff + 64 * i) for i in range(self.shnum)]
        stroff = sh[self.shstrndx][4]
        for s in sh:
            n = self.b[stroff + s[0]:self.b.index(0, stroff + s[0])].decode()
            out[n] = s  # name, type, flags, addr, offset, size, ...
        return out

    def dynamic(self):
        """(file offset of entry, tag, value) for each entry up to DT_NULL."""
        d = [p for p in self.phs() if p[0] == PT_DYNAMIC][0]
        out = []
        for off in range(d[2], d[2] + d[5], 16):
            tag, val = struct.unpack_from('<qQ', self.b, off)
            out.append((off, tag, val))
            if tag == 0:
                break
        return out

    def set_dyn(self, tag, val):
        for off, t, _ in self.dynamic():
            if t == tag:
                struct.pack_into('<Q', self.b, off + 8, val)
                return True
        return False

    def dyn_index(self, tag):
        return [i for i, p in enumerate(self.phs()) if p[0] == tag][0]


def make(lib):
    raw = open(lib, 'rb').read()
    n = len(raw)
    kinds = {}

    for frac in (4, 2):
        kinds[f'truncated-1of{frac}'] = raw[:n // frac]
    kinds['truncated-minus1'] = raw[:n - 1]

    b = bytearray(raw)
    b[n // 2:] = bytes(n - n // 2)
    kinds['second-half-zeroed'] = bytes(b)

    e = elf(raw)
    loads = [i for i, p in enumerate(e.phs()) if p[0] == PT_LOAD]
    e2 = elf(raw)
    p = e2.ph(loads[-1])
    p[2] = n + 0x10000  # p_offset past EOF
    e2.set_ph(loads[-1], p)
    kinds['phdr-offset-past-eof'] = bytes(e2.b)

    e2 = elf(raw)
    p = e2.ph(loads[-1])
    p[5] = p[6] + 0x100000  # p_filesz > p_memsz (and past EOF)
    e2.set_ph(loads[-1], p)
    kinds['phdr-filesz-huge'] = bytes(e2.b)

    e2 = elf(raw)
    di = e2.dyn_index(PT_DYNAMIC)
    p = e2.ph(di)
    e2.b[p[2]:p[2] + p[5]] = bytes(p[5])
    kinds['dynamic-zeroed'] = bytes(e2.b)

    e2 = elf(raw)
    p = e2.ph(di)
    p[3] = p[4] = 0x7ff00000  # p_vaddr/p_paddr outside every PT_LOAD
    e2.set_ph(di, p)
    kinds['dynamic-vaddr-outside'] = bytes(e2.b)

    e2 = elf(raw)
    p = e2.ph(di)
    p[0] = 0x6fffffff  # PT_DYNAMIC gone
    e2.set_ph(di, p)
    kinds['dynamic-missing'] = bytes(e2.b)

    for tag in ('STRTAB', 'SYMTAB', 'GNU_HASH', 'RELA', 'JMPREL', 'INIT_ARRAY', 'FINI_ARRAY',
                'VERSYM', 'VERNEED', 'INIT', 'FINI'):
        e2 = elf(raw)
        if e2.set_dyn(DT[tag], 0x7ff00000):
            kinds[f'dt-{tag.lower()}-outside'] = bytes(e2.b)
    e2 = elf(raw)
    if e2.set_dyn(DT['RELASZ'], 0x10000000):
        kinds['dt-relasz-huge'] = bytes(e2.b)
    e2 = elf(raw)
    if e2.set_dyn(DT['STRSZ'], 0x10000000):
        kinds['dt-strsz-huge'] = bytes(e2.b)
    e2 = elf(raw)
    if e2.set_dyn(DT['INIT_ARRAYSZ'], 0x1000):
        kinds['dt-init-arraysz-big'] = bytes(e2.b)
    e2 = elf(raw)
    for off, t, v in e2.dynamic():
        if t == DT['NEEDED']:
            struct.pack_into('<Q', e2.b, off + 8, 0x10000000)
            kinds['dt-needed-name-outside'] = bytes(e2.b)
            break

    secs = e.sections()
    for name in ('.text', '.dynsym', '.dynstr', '.gnu.hash', '.rela.dyn', '.rela.plt', '.init_array',
                 '.data.rel.ro', '.got', '.gnu.version', '.gnu.version_r', '.init', '.plt'):
        if name in secs and secs[name][1] != 8:  # not SHT_NOBITS
            off, size = secs[name][4], secs[name][5]
            b = bytearray(raw)
            b[off:off + size] = bytes(size)
            kinds[f'section-{name.strip(".").replace(".", "-")}-zeroed'] = bytes(b)
    if '.rela.dyn' in secs:  # one relocation's offset far away, one with a bad type
        off = secs['.rela.dyn'][4]
        b = bytearray(raw)
        struct.pack_into('<Q', b, off, 0x7ff00000)
        kinds['reloc-offset-outside'] = bytes(b)
        b = bytearray(raw)
        struct.pack_into('<Q', b, off + 8, 0xfe)
        kinds['reloc-type-unknown'] = bytes(b)
    if '.init_array' in secs and '.rela.dyn' in secs:  # init entry's addend pointing at data
        ia = secs['.init_array'][3]
        ro, rs = secs['.rela.dyn'][4], secs['.rela.dyn'][5]
        for o in range(ro, ro + rs, 24):
            r_off, r_info, add = struct.unpack_from('<QQq', raw, o)
            if r_off == ia:
                b = bytearray(raw)
                struct.pack_into('<q', b, o + 16, secs['.dynstr'][3])
                kinds['init-array-entry-to-data'] = bytes(b)
                break

    for seed in range(8):
        rnd = random.Random(seed)
        b = bytearray(raw)
        for _ in range(16):
            b[rnd.randrange(64, min(4096, n))] ^= 1 << rnd.randrange(8)
        kinds[f'flips-4k-seed{seed}'] = bytes(b)
    return kinds


def main():
    lib, out = sys.argv[1], sys.argv[2]
    only = sys.argv[4:] if len(sys.argv) > 3 and sys.argv[3] == '--only' else None
    for kind, data in make(lib).items():
        if only and kind not in only:
            continue
        d = os.path.join(out, kind)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, os.path.basename(lib)), 'wb') as f:
            f.write(data)
        print(kind)


if __name__ == '__main__':
    main()
