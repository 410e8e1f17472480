"""The names of the SpyreModel API (final: never rename)."""

GROUP = "serving.spyre.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpyreModel"
PLURAL = "spyremodels"
SINGULAR = "spyremodel"
SHORT_NAMES = ("sm",)
CRD_NAME = f"{PLURAL}.{GROUP}"
