#!/usr/bin/env bash
# Makes a folder holding Debian's fio and every shared library it loads, taken from
# the packages' .debs (apt-get download + dpkg -x: nothing is installed), for a
# machine that has no fio and no internet (the GPU machine): carry the folder and run
# FOLDER/fio, e.g. `python bench/record.py --fio .fio/fio ...`.
#
#   scripts/fio_portable.sh [FOLDER]   (default .fio; also writes FOLDER.tar.xz;
#                                        both ignored by git)
#
# Needs, here: Debian or Ubuntu with apt sources, and fio installed (its binary tells,
# through ldd, which libraries to take; `apt-get install -y fio`). The wrapper FOLDER/fio
# starts the carried binary with the carried dynamic loader and libraries only
# (ld-linux --library-path), so it does not depend on the other machine's glibc or
# libraries; the other machine needs the same architecture (x86_64) and a kernel with
# the io_uring/libaio calls fio uses (any recent Linux).
set -euo pipefail
out=${1:-.fio}
fio=$(command -v fio) || {
    echo "fio is not installed here: apt-get install -y fio, then run this again" >&2
    exit 2
}
out=$(mkdir -p "$out" && cd "$out" && pwd)
debs="$out/debs"
root="$out/root"
mkdir -p "$debs" "$root"

# The packages owning fio and each library it loads (ld.so and libc included).
mapfile -t libs < <(ldd "$fio" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
pkgs=(fio)
for lib in "${libs[@]}"; do
    real=$(readlink -f "$lib")
    for path in "$lib" "$real" "/usr$lib" "/usr$real" "${lib#/usr}" "${real#/usr}"; do
        if owner=$(dpkg -S "$path" 2>/dev/null); then
            pkgs+=("${owner%%:*}")
            break
        fi
    done || true
done
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sed 's/,.*//' | sort -u)
echo "packages: ${pkgs[*]}"
(cd "$debs" && apt-get download -q -o APT::Sandbox::User=root "${pkgs[@]}" >/dev/null)
for deb in "$debs"/*.deb; do
    dpkg -x "$deb" "$root"
done

# Keep only fio and the libraries it loads, by name, copied out of the tree (links
# resolved) into FOLDER/lib: the rest of the packages (plugins, data, docs) goes.
mkdir -p "$out/lib" "$out/bin"
cp "$root/usr/bin/fio" "$out/bin/fio"
for lib in "${libs[@]}"; do
    name=$(basename "$lib")
    src=$(find "$root" -name "$name" \( -type f -o -type l \) | head -1)
    [ -n "$src" ] || { echo "$name: in none of the extracted packages" >&2; exit 1; }
    cp -L "$src" "$out/lib/$name"
done
rm -rf "$root"
[ -f "$out/lib/ld-linux-x86-64.so.2" ] || { echo "no ld-linux-x86-64.so.2 taken" >&2; exit 1; }
cat >"$out/fio" <<'EOF'
#!/bin/sh
# Debian's fio with its own loader and libraries (made by scripts/fio_portable.sh).
d=$(cd "$(dirname "$0")" && pwd)
exec "$d/lib/ld-linux-x86-64.so.2" --library-path "$d/lib" "$d/bin/fio" "$@"
EOF
chmod +x "$out/fio"
rm -rf "$debs"
"$out/fio" --version
# One file to carry (the folder is over the 64 MiB a device call carries):
# scripts/gpu.sh bench-record unpacks .fio.tar.xz when the machine has no fio.
tar -cJf "$out.tar.xz" -C "$(dirname "$out")" "$(basename "$out")"
du -sh "$out" "$out.tar.xz"
