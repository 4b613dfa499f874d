# `cpack -G DEB` in the build folder: a Debian package of what `cmake --install` installs (the binary,
# the desktop entry, icons, MIME type, rules and capture helper), Depends computed from the binary's
# shared libraries by dpkg-shlibdeps (dpkg-dev). No maintainer scripts: the MIME database, the icon
# cache and the desktop database are refreshed by the dpkg file triggers that shared-mime-info,
# desktop-file-utils and hicolor-icon-theme declare on their folders, at install and at removal.
set(POOLSCOPE_PACKAGE_MAINTAINER "PoolScope maintainers <poolscope@localhost>"
    CACHE STRING "Maintainer field of the Debian package (Name <email>)")

set(CPACK_PACKAGE_NAME poolscope)
set(CPACK_PACKAGE_VENDOR "PoolScope")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "which GPU memory pool ran out, from the PyTorch crash dump")
set(CPACK_PACKAGE_DESCRIPTION
"PoolScope opens PyTorch CUDA allocator dumps (memory snapshot pickles, JSON,
zstd/gzip-compressed, Kineto traces) and splits GPU memory into pools: parameters,
gradients, optimizer state, activations, temporaries, inputs and the allocator's
cached-but-free bytes. It names the pool that was the wall at an out-of-memory
error and answers what-if questions (checkpointing, ZeRO/FSDP sharding, another
optimizer, a smaller batch) by replaying the allocations through a model of the
caching allocator. A Qt desktop window and a command line (report, explain,
whatif, render) for scripts and CI. Dumps are parsed, never executed.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# install() makes folders with the umask's permissions unless told; a package wants 0755 everywhere.
set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${POOLSCOPE_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # poolscope_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The icon and MIME caches are only rebuilt where these are installed; a desktop has them already.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "hicolor-icon-theme, shared-mime-info")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3, zstd")
set(CPACK_GENERATOR DEB)
include(CPack)
