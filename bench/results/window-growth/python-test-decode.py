# The decode time of the Python auto-offload test's data at two JPEG sizes, all-local, with the
# test loop's own work (1 ms sleep, report(), copying each crop):
#   SLUICE_BUILD_DIR=build /usr/bin/python3 bench/results/window-growth/python-test-decode.py 480 360
#   SLUICE_BUILD_DIR=build /usr/bin/python3 bench/results/window-growth/python-test-decode.py 960 720
# It prints the batches of six epochs and the seconds they took (2026-12-07: 36 in 0.18 s and 0.51 s).
import sys, time, subprocess, os, pathlib
sys.path.insert(0, 'build/python')
sys.path.insert(0, 'tests/python')
from conftest import package_path
sys.path.insert(0, str(package_path()))
import sluice
w, h = int(sys.argv[1]), int(sys.argv[2])
d = pathlib.Path(f'/tmp/heavy-{w}')
if not d.exists():
    subprocess.run(['build/bin/sluice','gen-data','--kind','jpeg','--count','48','--out',str(d/'data'),'--width',str(w),'--height',str(h),'--classes','4','--threads','2','--seed','7'],check=True,capture_output=True)
spec=(sluice.files(str(d/'data'/'**'/'*.jpg'), label="parent_dir", shuffle=True, seed=5)
            .map("read_file").map("decode_jpeg")
            .map("random_resized_crop", size=[96, 96], scale=[0.5, 1.0])
            .map("random_flip")
            .map("normalize", mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
            .batch(8).options(threads=1))
loader = sluice.Loader(spec, policy="none", epochs=6, sample_ids=True)
t=time.time(); n=0
for b in loader:
    time.sleep(0.001); loader.report(); n+=1
    for row in range(len(b["sample_id"])): b["image"][row].tobytes()
print(w, h, n, 'batches', round(time.time()-t,2), 's')
