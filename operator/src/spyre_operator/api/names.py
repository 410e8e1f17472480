"""The names of the SpyreModel and SpyreCache APIs (final: never rename)."""

GROUP = "serving.spyre.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpyreModel"
PLURAL = "spyremodels"
SINGULAR = "spyremodel"
SHORT_NAMES = ("sm",)
CRD_NAME = f"{PLURAL}.{GROUP}"

# The compiled-graph cache of one configuration: an inventory entry and a precompile request.
CACHE_KIND = "SpyreCache"
CACHE_PLURAL = "spyrecaches"
CACHE_SINGULAR = "spyrecache"
CACHE_SHORT_NAMES = ("scache",)  # "sc" is StorageClass
CACHE_CRD_NAME = f"{CACHE_PLURAL}.{GROUP}"
