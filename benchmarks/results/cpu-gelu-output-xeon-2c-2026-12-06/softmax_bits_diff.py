# Counts differing floats between the before/after outputs of softmax_bits_and_time.cpp.txt (run as
# `smb FILE` with each library), and between its variants' sections (portable, avx2, avx512).
import math, struct, sys
def floats(path):
    data = open(path, 'rb').read()
    return struct.unpack(f'{len(data) // 4}I', data)
old, new = floats(sys.argv[1]), floats(sys.argv[2])
as_float = lambda u: struct.unpack('f', struct.pack('I', u))[0]
diff = [i for i in range(len(old)) if old[i] != new[i]]
print(f'before vs after: {len(diff)} of {len(old)} floats differ; all NaN in both: '
      f'{all(math.isnan(as_float(old[i])) and math.isnan(as_float(new[i])) for i in diff)}')
third = len(old) // 3
for name, bits in (('before', old), ('after', new)):
    d = [i for i in range(third) if bits[i] != bits[third + i]]
    print(f'{name}: portable vs avx2 sections: {len(d)} floats differ; all NaN in both: '
          f'{all(math.isnan(as_float(bits[i])) and math.isnan(as_float(bits[third + i])) for i in d)}')
